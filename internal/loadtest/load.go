// Package loadtest drives signed, realistic Stripe events at a webhook
// endpoint and measures the raw storage ceilings (DynamoDB conditional put,
// Postgres single-row transaction) at the same concurrency, so that ingest is
// reported as a ratio to what its storage round trips allow.
package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/stripe/stripe-go/v76/webhook"
)

// Result of one load phase.
type Result struct {
	Name        string
	Concurrency int
	Duration    time.Duration
	Requests    int64
	Errors      int64
	Latencies   []time.Duration // sorted
}

// Rate is requests per second.
func (r Result) Rate() float64 { return float64(r.Requests) / r.Duration.Seconds() }

// Quantile returns the q-quantile latency (0 < q ≤ 1).
func (r Result) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.Latencies))*q+0.5) - 1
	return r.Latencies[max(0, min(i, len(r.Latencies)-1))]
}

func (r Result) String() string {
	return fmt.Sprintf("%-28s c=%-3d %7.0f req/s  p50=%-8s p95=%-8s p99=%-8s errors=%d (n=%d)",
		r.Name, r.Concurrency, r.Rate(), r.Quantile(.5).Round(10*time.Microsecond), r.Quantile(.95).Round(10*time.Microsecond),
		r.Quantile(.99).Round(10*time.Microsecond), r.Errors, r.Requests)
}

// Run calls op from concurrency workers for duration (and at most maxOps
// calls in total when maxOps > 0), timing each call.
func Run(ctx context.Context, name string, concurrency int, duration time.Duration, maxOps int64, op func(ctx context.Context, worker int, i int64) error) Result {
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var (
		n, errs atomic.Int64
		mu      sync.Mutex
		lat     []time.Duration
		wg      sync.WaitGroup
	)
	start := time.Now()
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			for ctx.Err() == nil {
				i := n.Add(1)
				if maxOps > 0 && i > maxOps {
					n.Add(-1)
					break
				}
				t0 := time.Now()
				if err := op(ctx, w, i); err != nil {
					if ctx.Err() != nil {
						n.Add(-1)
						break
					}
					errs.Add(1)
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return Result{Name: name, Concurrency: concurrency, Duration: elapsed, Requests: n.Load(), Errors: errs.Load(), Latencies: lat}
}

// Mix generates realistic events: payments, subscriptions, invoices, types
// the service does not handle, platform and Connect accounts, and a share of
// redeliveries of events already sent.
type Mix struct {
	DuplicateShare float64 // e.g. 0.05
	mu             sync.Mutex
	sent           [][]byte
	rng            *rand.Rand
}

// NewMix returns a generator with a fixed seed (runs are comparable).
func NewMix(duplicateShare float64, seed uint64) *Mix {
	return &Mix{DuplicateShare: duplicateShare, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

var accounts = []string{"", "acct_1LoadAAAAAAAAAAA", "acct_1LoadBBBBBBBBBBB", "acct_1LoadCCCCCCCCCCC"}

// Next returns the next event JSON.
func (m *Mix) Next(now time.Time) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.sent) > 0 && m.rng.Float64() < m.DuplicateShare {
		return m.sent[m.rng.IntN(len(m.sent))]
	}
	account := accounts[m.rng.IntN(len(accounts))]
	var typ string
	var obj map[string]any
	// Stripe ids are letters, digits and underscores (stripeevent.Parse checks).
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:18]
	switch k := m.rng.IntN(10); {
	case k < 4:
		typ = "payment_intent.succeeded"
		obj = map[string]any{"id": "pi_load" + id, "object": "payment_intent", "amount": 1000 + m.rng.IntN(9000), "currency": "usd",
			"status": "succeeded", "livemode": false, "customer": "cus_load" + id[:8], "invoice": nil,
			"metadata": map[string]any{"purchase_id": uuid.NewString(), "account": uuid.NewString()}}
	case k < 6:
		typ = "customer.subscription.updated"
		obj = map[string]any{"id": "sub_load" + id, "object": "subscription", "status": "active", "customer": "cus_load" + id[:8],
			"livemode": false, "metadata": map[string]any{"purchase_id": uuid.NewString(), "account": uuid.NewString()},
			"items": map[string]any{"object": "list", "data": []any{}, "has_more": false}}
	case k < 8:
		typ = "invoice.paid"
		obj = map[string]any{"id": "in_load" + id, "object": "invoice", "status": "paid", "paid": true, "amount_paid": 1500,
			"currency": "usd", "subscription": "sub_load" + id, "payment_intent": "pi_load" + id, "livemode": false}
	default:
		typ = []string{"customer.created", "charge.captured", "payout.paid", "radar.early_fraud_warning.created"}[m.rng.IntN(4)]
		obj = map[string]any{"id": "obj_load" + id, "object": "unknown", "livemode": false}
	}
	ev := map[string]any{
		"id": "evt_load" + uuid.NewString()[:8] + id, "object": "event", "api_version": "2023-10-16",
		"created": now.Unix(), "livemode": false, "pending_webhooks": 1, "type": typ,
		"data":    map[string]any{"object": obj},
		"request": map[string]any{"id": nil, "idempotency_key": nil},
	}
	if account != "" {
		ev["account"] = account
	}
	b, _ := json.Marshal(ev)
	if len(m.sent) < 10000 {
		m.sent = append(m.sent, b)
	}
	return b
}

// Webhook posts one signed event.
type Webhook struct {
	URL    string
	Secret string
	Client *http.Client
}

// Post sends payload and fails on any non-200 answer.
func (w Webhook) Post(ctx context.Context, payload []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: w.Secret}).Header)
	resp, err := w.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var sink bytes.Buffer
	_, _ = sink.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, sink.String())
	}
	return nil
}
