package stripetest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"
)

// Stripe is the one fake Stripe of the tests: an httptest server speaking
// Stripe's JSON for every call the service makes, on one base URL
// (STRIPE_API_BASE):
//
//   - the purchase API's objects (objects.go): unconfirmed PaymentIntents,
//     PaymentMethod attach, invoices, invoice items, subscriptions, and GETs
//     of what it created or what a test Put (the invoice lookups);
//   - the billing core's off-session charges (charges.go): confirmed
//     PaymentIntents whose outcome Decide picks (succeed, decline, a bank
//     debit settled later, a lost answer, a 500 before or after acting),
//     search and list, settlement and refunds, and the events about them;
//   - the Events API (eventsapi.go): GET /v1/events with Stripe's filters,
//     cursors and per-account listings.
//
// Objects belong to the connected account of the request that made them
// (Stripe-Account; none is the platform): another account's objects do not
// exist. Idempotency-Key is honoured as Stripe does. Every request is kept
// (Requests) so tests can assert headers and form parameters.
type Stripe struct {
	// URL is the base URL (STRIPE_API_BASE).
	URL string
	// Key, when set, is the only API key accepted (Bearer); otherwise any
	// secret or restricted key (sk_…, rk_…) is.
	Key string

	// Decide picks the behavior of a new confirmed PaymentIntent (default
	// Succeed). It runs outside the fake's lock: it may block.
	Decide func(p PI) Behavior
	// DeclineAs is the Stripe code of a Decline (lost_card, expired_card,
	// …; "" or unset: insufficient_funds), rendered as Stripe does
	// (declines.go).
	DeclineAs func(p PI) string
	// MethodAs is the payment_method_details of a PaymentIntent's charge
	// (nil or unset: MethodCard, or MethodBank for a bank account's
	// payment method id; chargeobject.go).
	MethodAs func(p PI) map[string]any
	// ActedAs is the real outcome of an Acted500 PaymentIntent: Succeed
	// (default), Decline or Process.
	ActedAs func(p PI) Behavior
	// LostAs is the real outcome of a Lost PaymentIntent (default Succeed).
	LostAs func(p PI) Behavior
	// DeclineWith is the error of a declined PaymentIntent (default
	// card_declined / insufficient_funds).
	DeclineWith func(p PI) CardError
	// TestCards makes Stripe's test payment method ids decide payments
	// (testcards.go), as the local Stripe does; off, every one succeeds.
	TestCards bool
	// SearchLag hides PaymentIntents younger than this from the Search API
	// (Stripe's search lags writes; List does not).
	SearchLag time.Duration

	now         func() time.Time
	front       atomic.Pointer[http.Handler] // Wrap's, else nil
	limiter     *rate.Limiter
	down        atomic.Bool
	rateLimited atomic.Int64
	seq         atomic.Int64

	mu       sync.Mutex
	requests []Request
	fails    []*failure
	replies  map[string]reply // account|path|idempotency key -> first answer
	objects  map[string]map[string]any
	owner    map[string]string // object id -> Stripe-Account
	created  map[string]int    // object type -> count created
	charges  charges
	events   eventList
	v2       v2Events // thin.go
	// deauthorized: connected accounts that disconnected the platform
	// (DashboardChange), answered 403 account_invalid.
	deauthorized map[string]bool
}

// Options of a fake Stripe; the zero value is a fake with no rate limit on
// the machine's clock.
type Options struct {
	// RateLimit > 0 allows that many requests per second (429 rate_limit
	// beyond it, as Stripe does).
	RateLimit float64
	// RateBurst is how many requests above the rate the limit lets through
	// at once (default a tenth of a second's worth, at least 1).
	RateBurst int
	// Now is the fake's clock (created times, search lag); default time.Now.
	Now func() time.Time
	// Key: see Stripe.Key.
	Key string
}

// Request is one request the fake received.
type Request struct {
	Method         string
	Path           string
	StripeAccount  string
	StripeContext  string // API v2's account header
	IdempotencyKey string
	Form           url.Values
	Replayed       bool      // answered from the idempotency cache
	At             time.Time // when it arrived (the machine's clock, not Now): rates at Stripe
}

// objectCall: everything but the Events API and the billing core's charges
// (a confirmed PaymentIntent, its search, list and reads).
func (r Request) objectCall() bool {
	switch {
	case r.Path == "/v1/events" || strings.HasPrefix(r.Path, "/v1/events/"):
		return false
	case r.Method == http.MethodPost:
		return !isCharge(r)
	case r.Method == http.MethodGet && r.Path == "/v1/payment_intents/search", r.Method == http.MethodGet && r.Path == "/v1/payment_intents":
		return false
	}
	return true
}

type reply struct {
	status int
	body   []byte
}

type failure struct {
	method, path string
	status       int
	body         []byte
	times        int // < 0: always
}

// New starts a fake Stripe; it stops when the test ends.
func New(t testing.TB, o Options) *Stripe {
	t.Helper()
	f := NewHandler(o)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// NewHandler is the fake without a server: the local Stripe
// (internal/localstripe, cmd/stripe-local) serves it on its own listener
// and sets URL.
func NewHandler(o Options) *Stripe {
	f := &Stripe{Key: o.Key, now: o.Now, replies: map[string]reply{}, objects: map[string]map[string]any{},
		owner: map[string]string{}, created: map[string]int{}, deauthorized: map[string]bool{}}
	if f.now == nil {
		f.now = time.Now
	}
	if o.RateLimit > 0 {
		burst := o.RateBurst
		if burst <= 0 {
			burst = max(1, int(o.RateLimit/10))
		}
		f.limiter = rate.NewLimiter(rate.Limit(o.RateLimit), burst)
	}
	f.charges.init()
	f.events.init()
	return f
}

// ServeHTTP answers one request: Wrap's handler if any, else the fake.
func (f *Stripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := f.front.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	f.serve(w, r)
}

// Wrap puts mw in front of the fake: a test's own faults around Stripe's
// behaviour (an outage of one account on one day, an answer lost after
// Stripe acted). next is the fake itself.
func (f *Stripe) Wrap(mw func(next http.Handler) http.Handler) {
	h := mw(http.HandlerFunc(f.serve))
	f.front.Store(&h)
}

// Fail makes the next `times` requests (times < 0: all) to method+path
// answer status with a Stripe error of errType/code/message. path may end
// with "*" to match a prefix.
func (f *Stripe) Fail(method, path string, status int, errType, code, message string, times int) {
	f.Answer(method, path, status, errBody(errType, code, message, nil), times)
}

// Answer makes the next `times` requests (times < 0: all) to method+path
// (a trailing "*" matches a prefix) answer status with body, whatever the
// fake would have answered: a card error that carries the PaymentIntent
// (Stripe includes it, client_secret and all), or a wrong answer (another
// event than the one asked for).
func (f *Stripe) Answer(method, path string, status int, body []byte, times int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = append(f.fails, &failure{method: method, path: path, status: status, body: body, times: times})
}

// Recover drops every answer Fail or Answer scripted that has not run out (the cause
// is fixed).
func (f *Stripe) Recover() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = nil
}

// SetDown makes every request answer 500 without acting (an outage).
func (f *Stripe) SetDown(down bool) { f.down.Store(down) }

// Requests returns the requests received so far (429s and 500s included).
func (f *Stripe) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.requests...)
}

// RequestCount is len(Requests()) without the copy.
func (f *Stripe) RequestCount() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.requests))
}

// RateLimited counts the requests refused with 429 by Options.RateLimit.
func (f *Stripe) RateLimited() int64 { return f.rateLimited.Load() }

func (f *Stripe) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "bad form: "+err.Error(), nil)
		return
	}
	req := Request{Method: r.Method, Path: r.URL.Path, StripeAccount: r.Header.Get("Stripe-Account"), StripeContext: r.Header.Get("Stripe-Context"),
		IdempotencyKey: r.Header.Get("Idempotency-Key"), Form: r.PostForm, At: time.Now()}
	if r.Method == http.MethodGet {
		req.Form = r.URL.Query()
	}
	listing := r.URL.Path == "/v1/events" || strings.HasPrefix(r.URL.Path, "/v1/events/")
	f.mu.Lock()
	seq := len(f.requests)
	f.requests = append(f.requests, req)
	var n int
	if listing {
		n = f.events.arrived(time.Now())
	}
	f.mu.Unlock()
	if !f.authorized(r.Header.Get("Authorization")) {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided", nil)
		return
	}
	if f.limiter != nil && !f.limiter.Allow() {
		f.rateLimited.Add(1)
		writeError(w, http.StatusTooManyRequests, "invalid_request_error", "rate_limit", "Request rate limit exceeded.", nil)
		return
	}
	if f.down.Load() {
		writeError(w, http.StatusInternalServerError, "api_error", "", "internal error", nil)
		return
	}
	if strings.HasPrefix(req.Path, "/v2/") {
		f.serveV2(w, r, req)
		return
	}
	if req.objectCall() {
		rep := f.objectRequest(req, seq)
		f.mu.Lock()
		replayed := f.requests[seq].Replayed
		f.mu.Unlock()
		if replayed { // as Stripe marks an idempotency replay
			w.Header().Set("Idempotent-Replayed", "true")
		}
		f.write(w, rep)
		return
	}
	f.mu.Lock()
	rep, failed := f.scriptedFailure(req)
	f.mu.Unlock()
	if failed {
		f.write(w, rep)
		return
	}
	switch {
	case listing:
		f.listEvents(w, r, n)
	case isCharge(req):
		f.createCharge(w, r)
	case req.Path == "/v1/payment_intents/search":
		f.searchCharges(w, r)
	default:
		f.listCharges(w, r)
	}
}

// authorized checks the Authorization header.
func (f *Stripe) authorized(header string) bool {
	key, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return false
	}
	if f.Key != "" {
		return key == f.Key
	}
	return strings.HasPrefix(key, "sk_") || strings.HasPrefix(key, "rk_")
}

// scriptedFailure answers req with the first matching Fail, if any; f.mu
// is held.
func (f *Stripe) scriptedFailure(req Request) (reply, bool) {
	for _, fl := range f.fails {
		if fl.times == 0 || fl.method != req.Method {
			continue
		}
		if fl.path != req.Path && !(strings.HasSuffix(fl.path, "*") && strings.HasPrefix(req.Path, strings.TrimSuffix(fl.path, "*"))) {
			continue
		}
		if fl.times > 0 {
			fl.times--
		}
		rep := reply{fl.status, fl.body}
		f.remember(req, rep)
		return rep, true
	}
	return reply{}, false
}

// remember keeps the first answer to an idempotent POST (errors below 500
// included, as Stripe does, but a 429: Stripe did not execute it); f.mu is
// held. Charges keep their own keys
// (charges.go): their replays show the PaymentIntent as it is now.
func (f *Stripe) remember(req Request, rep reply) {
	if req.IdempotencyKey != "" && req.Method == http.MethodPost && rep.status < 500 && rep.status != http.StatusTooManyRequests && !isCharge(req) {
		f.replies[replyKey(req)] = rep
	}
}

func replyKey(req Request) string {
	return req.StripeAccount + "|" + req.Path + "|" + req.IdempotencyKey
}

func (f *Stripe) write(w http.ResponseWriter, rep reply) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_fake"+uuid.NewString()[:8])
	w.WriteHeader(rep.status)
	_, _ = w.Write(rep.body)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers a Stripe error; extra fields (payment_intent,
// decline_code) join the error object.
func writeError(w http.ResponseWriter, status int, typ, code, msg string, extra map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(errBody(typ, code, msg, extra))
}

func errBody(typ, code, msg string, extra map[string]any) []byte {
	e := map[string]any{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	for k, v := range extra {
		e[k] = v
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	return b
}
