package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// The binary harness: what every test that runs the real binary against
// the local stack shares (binary, environ, runCommand and server are in
// binary_test.go).

// stackVars is the environment of a test's binary: its own Postgres
// database and DynamoDB tables (deleted when the test ends), the fake
// Stripe behind STRIPE_API_BASE (and its key, when it expects one), then
// vars, which win.
func stackVars(t testing.TB, stripe *stripetest.Stripe, vars map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{
		"DYNAMODB_ENDPOINT":     testenv.DynamoEndpoint(t),
		"EVENTS_TABLE":          testenv.TableName("events"),
		"BILLING_TABLE":         testenv.TableName("billing"),
		"BILLING_HISTORY_TABLE": testenv.TableName("billing-history"),
		"LOCKS_TABLE":           testenv.TableName("locks"),
		"STRIPE_API_BASE":       stripe.URL,
	}
	if stripe.Key != "" {
		out["STRIPE_API_KEY"] = stripe.Key
	}
	for k, v := range vars {
		out[k] = v
	}
	if out["DATABASE_URL"] == "" {
		out["DATABASE_URL"] = testenv.DatabaseURL(t)
	}
	ddb := testenv.Dynamo(t)
	t.Cleanup(func() {
		for _, k := range []string{"EVENTS_TABLE", "BILLING_TABLE", "BILLING_HISTORY_TABLE", "LOCKS_TABLE"} {
			_, _ = ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(out[k])})
		}
	})
	return out
}

// with is vars plus LISTEN_ADDR addr (and ADMIN_LISTEN_ADDR a free
// address, unless vars has one), as the binary's environment.
func with(vars map[string]string, addr string) []string {
	m := map[string]string{"LISTEN_ADDR": addr, "ADMIN_LISTEN_ADDR": loopbackPort()}
	for k, v := range vars {
		m[k] = v
	}
	return environ(m)
}

// migrateStack runs `stripe-payments migrate` with vars; a failure ends the test.
func migrateStack(t testing.TB, bin string, vars map[string]string) {
	t.Helper()
	if _, stderr, err := runCommand(t, bin, with(vars, freeAddr(t)), time.Minute, "migrate"); err != nil {
		t.Fatalf("migrate: %v\n%s", err, stderr)
	}
}

// actionReceiver is ACTIONS_URL (testenv.ActionReceiver): it refuses a
// delivery whose signature is wrong (401) or whose body is not an action
// under its Idempotency-Key (400), and keeps the rest as A: deliveries per
// id and the first of each. A delivery that is refused, or whose effect
// differs from an earlier one's of the same id, is bad. Tests read its
// fields under mu.
type actionReceiver[A any] struct {
	URL    string
	id     func(A) string
	effect func(A) string

	mu         sync.Mutex
	deliveries map[string]int
	byID       map[string]A
	first      []A // in the order of their first delivery
	bad        []string
}

// newActionReceiver starts a receiver verifying with secret; it stops when
// the test ends.
func newActionReceiver[A any](t *testing.T, secret string, id, effect func(A) string) *actionReceiver[A] {
	r := &actionReceiver[A]{id: id, effect: effect, deliveries: map[string]int{}, byID: map[string]A{}}
	recv := testenv.NewActionReceiver(t, secret)
	recv.Observe(r.keep)
	r.URL = recv.URL
	return r
}

// keep records one delivery.
func (s *actionReceiver[A]) keep(d testenv.Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var a A
	switch {
	case d.Signature != nil:
		s.bad = append(s.bad, "signature: "+d.Signature.Error())
		return
	case !d.Valid || json.Unmarshal(d.Body, &a) != nil || s.id(a) != d.Key:
		s.bad = append(s.bad, "body: "+string(d.Body))
		return
	}
	if prev, ok := s.byID[d.Key]; ok {
		if s.effect(prev) != s.effect(a) {
			s.bad = append(s.bad, "action "+d.Key+" changed between deliveries")
		}
	} else {
		s.first = append(s.first, a)
	}
	s.deliveries[d.Key]++
	s.byID[d.Key] = a
}

// redelivered counts the actions delivered more than once.
func (s *actionReceiver[A]) redelivered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.deliveries {
		if c > 1 {
			n++
		}
	}
	return n
}

// fixtures reads the named event fixtures as documents to vary.
func fixtures(t *testing.T, names ...string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, name := range names {
		var doc map[string]any
		require.NoError(t, json.Unmarshal(stripetest.Fixture(t, name), &doc))
		out[name] = doc
	}
	return out
}

// fixtureEvent is a copy of fixture with a fresh id, created at created,
// on account ("" the platform), with object's fields set on data.object.
func fixtureEvent(fixture map[string]any, account string, created int64, object map[string]any) (id string, payload []byte) {
	var doc map[string]any
	raw, _ := json.Marshal(fixture)
	_ = json.Unmarshal(raw, &doc)
	id = stripetest.NewID()
	doc["id"] = id
	doc["created"] = created
	if account == "" {
		delete(doc, "account")
	} else {
		doc["account"] = account
	}
	obj := doc["data"].(map[string]any)["object"].(map[string]any)
	for k, v := range object {
		obj[k] = v
	}
	payload, _ = json.Marshal(doc)
	return id, payload
}

// runLoad runs n workers, each calling flow with its own generator (seed,
// worker) and a counter, until the returned stop, which waits for them.
func runLoad(n int, seed uint64, flow func(rng *rand.Rand, worker, i int)) (stop func()) {
	done := make(chan struct{})
	var workers sync.WaitGroup
	for w := range n {
		workers.Add(1)
		go func() {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				flow(rng, w, i)
			}
		}()
	}
	return func() { close(done); workers.Wait() }
}

// postJSON POSTs body to url with the headers (name, value pairs) and
// returns the status and the answer.
func postJSON(client *http.Client, url string, body []byte, headers ...string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, answer, nil
}

// recordsOf reads the events table's records of ids, 100 per BatchGet.
func recordsOf(t *testing.T, store *events.Store, ids []string) map[string]events.Record {
	t.Helper()
	out := map[string]events.Record{}
	for start := 0; start < len(ids); start += 100 {
		page, err := store.BatchGet(context.Background(), ids[start:min(start+100, len(ids))])
		require.NoError(t, err)
		for id, rec := range page {
			out[id] = rec
		}
	}
	return out
}

// ledgerEventIDs lists the processed-events ledger: one row per applied event.
func ledgerEventIDs(t *testing.T, pool *pgx.Conn) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT event_id FROM processed_events`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// purchase POSTs raw to base+"/v1/purchases" until it is answered 201 or
// refused (a 4xx other than retryOn), retrying with the same
// Idempotency-Key (as a client must) after connection errors and other
// answers, for at most 45 s; each retry counts in retries. It returns the
// 201's body; a refusal or the deadline is reported with t.Errorf.
func purchase(t *testing.T, client *http.Client, base, token, key string, raw []byte, retries *atomic.Int64, retryOn ...int) ([]byte, bool) {
	deadline := time.Now().Add(45 * time.Second)
	var last string
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			retries.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Errorf("purchase %s never answered 201 within 45s: %s", key, last)
			return nil, false
		}
		status, answer, err := postJSON(client, base+"/v1/purchases", raw, "Authorization", "Bearer "+token, "Idempotency-Key", key)
		if err != nil {
			last = err.Error()
			continue
		}
		last = fmt.Sprintf("%d %s", status, answer)
		if status == http.StatusCreated {
			return answer, true
		}
		if status >= 400 && status < 500 && !slices.Contains(retryOn, status) {
			t.Errorf("purchase %s refused: %s", key, last)
			return nil, false
		}
	}
}
