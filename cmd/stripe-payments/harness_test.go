package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/dispatch"
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
func stackVars(t *testing.T, stripe *stripetest.Stripe, vars map[string]string) map[string]string {
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

// with is vars plus LISTEN_ADDR addr, as the binary's environment.
func with(vars map[string]string, addr string) []string {
	m := map[string]string{"LISTEN_ADDR": addr}
	for k, v := range vars {
		m[k] = v
	}
	return environ(m)
}

// migrateStack runs `stripe-payments migrate` with vars; a failure ends the test.
func migrateStack(t *testing.T, bin string, vars map[string]string) {
	t.Helper()
	if _, stderr, err := runCommand(t, bin, with(vars, freeAddr(t)), time.Minute, "migrate"); err != nil {
		t.Fatalf("migrate: %v\n%s", err, stderr)
	}
}

// actionReceiver is ACTIONS_URL: it verifies each delivery's signature
// (401 otherwise) and that its body is an A whose id is its
// Idempotency-Key (400 otherwise), counts deliveries per id and keeps the
// first of each. A delivery whose effect differs from an earlier one's of
// the same id is bad. Tests read its fields under mu.
type actionReceiver[A any] struct {
	URL    string
	secret string
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
	r := &actionReceiver[A]{secret: secret, id: id, effect: effect, deliveries: map[string]int{}, byID: map[string]A{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (s *actionReceiver[A]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := dispatch.Verify(r.Header.Get("X-Signature"), s.secret, body, 5*time.Minute, time.Now()); err != nil {
		s.bad = append(s.bad, "signature: "+err.Error())
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var a A
	if err := json.Unmarshal(body, &a); err != nil || s.id(a) == "" || s.id(a) != r.Header.Get("Idempotency-Key") {
		s.bad = append(s.bad, "body: "+string(body))
		http.Error(w, "bad action", http.StatusBadRequest)
		return
	}
	id := s.id(a)
	if prev, ok := s.byID[id]; ok {
		if s.effect(prev) != s.effect(a) {
			s.bad = append(s.bad, "action "+id+" changed between deliveries")
		}
	} else {
		s.first = append(s.first, a)
	}
	s.deliveries[id]++
	s.byID[id] = a
	w.WriteHeader(http.StatusOK)
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
