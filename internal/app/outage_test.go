package app_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// TestDependencyOutages stops Postgres, then DynamoDB, for ten seconds each
// under load (a proxy resets every connection and refuses new ones), and
// shows: the webhook never answers 200 for an event it did not record and
// process, /readyz turns red and back green, and after recovery plus
// redeliveries every event is processed exactly once.
func TestDependencyOutages(t *testing.T) {
	if testing.Short() {
		t.Fatal("this test has no short mode; run it with `make test`")
	}
	dbURL, err := url.Parse(testenv.DatabaseURL(t))
	require.NoError(t, err)
	pg := testenv.NewFaultProxy(t, dbURL.Host)
	dbURL.Host = pg.Addr()
	dynamoURL, err := url.Parse(testenv.DynamoEndpoint(t))
	require.NoError(t, err)
	ddb := testenv.NewFaultProxy(t, dynamoURL.Host)
	a := startAppWith(t, nil, map[string]string{
		"DATABASE_URL":      dbURL.String(),
		"DYNAMODB_ENDPOINT": "http://" + ddb.Addr(),
	})
	base := a.Server.URL()
	client := &http.Client{Timeout: 20 * time.Second}

	type delivery struct {
		payload []byte
		ok      bool
	}
	var (
		mu        sync.Mutex
		sent      = map[string]*delivery{}
		refused   atomic.Int64
		stop      = make(chan struct{})
		senders   sync.WaitGroup
		outageIDs sync.Map // event ids answered 200 while a dependency was cut
		inOutage  atomic.Bool
	)
	send := func(id string, payload []byte) bool {
		req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/stripe", bytesReader(payload))
		req.Header.Set("Stripe-Signature", stripetest.Sign(payload, secret, time.Now()))
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && inOutage.Load() {
			outageIDs.Store(id, true)
		}
		if resp.StatusCode != http.StatusOK {
			assert.GreaterOrEqual(t, resp.StatusCode, 500, "a valid event is never refused with a 4xx")
		}
		return resp.StatusCode == http.StatusOK
	}
	for range 6 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := stripetest.NewID()
				payload := stripetest.Event{Fixture: "payment_intent.succeeded", ID: id}.Build(t)
				ok := send(id, payload)
				if !ok {
					refused.Add(1)
				}
				mu.Lock()
				sent[id] = &delivery{payload: payload, ok: ok}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}

	ready := func() int {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitReady := func(want int) {
		deadline := time.Now().Add(15 * time.Second)
		for ready() != want {
			require.True(t, time.Now().Before(deadline), "/readyz never became %d", want)
			time.Sleep(100 * time.Millisecond)
		}
	}
	outage := func(name string, p *testenv.FaultProxy) {
		before := refused.Load()
		inOutage.Store(true)
		p.Cut()
		waitReady(http.StatusServiceUnavailable)
		time.Sleep(10 * time.Second)
		p.Restore()
		inOutage.Store(false)
		waitReady(http.StatusOK)
		assert.Greater(t, refused.Load(), before, "%s outage refused nothing: it was not real", name)
		time.Sleep(2 * time.Second)
	}
	time.Sleep(2 * time.Second)
	outage("postgres", pg)
	outage("dynamodb", ddb)
	close(stop)
	senders.Wait()

	// Stripe redelivers whatever was not acknowledged.
	mu.Lock()
	defer mu.Unlock()
	for id, d := range sent {
		for attempt := 0; !d.ok; attempt++ {
			require.Less(t, attempt, 20, "event %s never accepted after recovery", id)
			d.ok = send(id, d.payload)
			if !d.ok {
				time.Sleep(200 * time.Millisecond)
			}
		}
	}

	ids := make([]string, 0, len(sent))
	for id := range sent {
		ids = append(ids, id)
	}
	ctx := context.Background()
	records, err := a.Events.BatchGet(ctx, ids)
	require.NoError(t, err)
	var ledgerRows int
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE event_id = ANY($1)`, ids).Scan(&ledgerRows))
	assert.Equal(t, len(ids), ledgerRows, "every event applied exactly once")
	for _, id := range ids {
		rec, ok := records[id]
		if assert.True(t, ok, "event %s not recorded", id) {
			assert.Equal(t, events.StatusProcessed, rec.Status, "event %s", id)
		}
	}
	t.Logf("%d events, %d refusals during the outages, %d accepted while a dependency was cut",
		len(ids), refused.Load(), countMap(&outageIDs))
}

func countMap(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
