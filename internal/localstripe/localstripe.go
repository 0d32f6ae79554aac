// Package localstripe is the local Stripe of `make run` (docs/design.md §3 "The
// embedded default for Stripe"): the tests' fake Stripe (stripetest.Stripe,
// the one fake of this repository) with Stripe's test payment method ids
// deciding payments, test-mode keys only, and what Stripe does on its own
// around the API: events for what happens on it, listed by the Events API
// and delivered as signed webhooks with retries, and bank debits that settle
// after a delay. cmd/stripe-local serves it; it is never part of the
// service's binary.
package localstripe

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// APIVersion is the API version of the events it sends (the service's
// stripe-go v76).
const APIVersion = "2023-10-16"

// Config of a local Stripe.
type Config struct {
	// WebhookURL receives the events (the service's /webhooks/stripe);
	// empty sends none (they are still listed by the Events API).
	WebhookURL string
	// WebhookSecret signs them (the service's STRIPE_WEBHOOK_SECRET).
	WebhookSecret string
	// DropRate in [0,1] is the fraction of events never delivered (as a
	// delivery lost on the way), so the poller's job can be seen.
	DropRate float64
	// ACHDelay is how long a bank debit stays processing.
	ACHDelay time.Duration
	// RetryBase is the pause before the second delivery attempt after a
	// failure; it doubles for each later one (Stripe's backoff, shortened).
	RetryBase time.Duration
	// MaxAttempts bounds the deliveries of one event (Stripe: 3 days in
	// live mode, 3 attempts over a few hours in test mode).
	MaxAttempts int
	// Account is a connected account that exists from the start.
	Account string
	// Client sends the webhooks (default: a client with a 10 s timeout).
	Client *http.Client
	Log    *slog.Logger
	// Now is the clock of events and created times (default time.Now).
	Now func() time.Time
	// ThinTypes are the event types a thin event destination asks for
	// (Stripe's names: v1.payment_intent.succeeded, …; "v1.*" every v1
	// type): each such change is also a thin event (GET /v2/core/events),
	// delivered signed to WebhookURL in place of the snapshot event.
	ThinTypes []string
	// SnapshotToo keeps delivering the snapshot events of ThinTypes beside
	// the thin ones (two destinations side by side, as while migrating).
	SnapshotToo bool
	// StatePath, read by Open, is the file the state is kept in across a
	// restart ("" in memory only).
	StatePath string
	// Actions, when set, is kept in the state file too.
	Actions *Actions
}

// Server is one local Stripe.
type Server struct {
	cfg  Config
	fake *stripetest.Stripe

	mu          sync.Mutex
	deliveries  map[string]*Delivery
	order       []string
	payloads    map[string][]byte // event id -> the body delivered
	settlements map[string]settlement
	wg          sync.WaitGroup
	closed      bool
	timers      map[*time.Timer]struct{}

	saver *saver // state.go; nil in memory only
}

// settlement is a bank debit waiting to settle.
type settlement struct {
	ID  string    `json:"id"`
	PM  string    `json:"payment_method"`
	Due time.Time `json:"due"`
}

// Delivery is the webhook delivery state of one event.
type Delivery struct {
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	// Kind is snapshot (an Event, /v1/events) or thin (a v2.core.event,
	// /v2/core/events).
	Kind string `json:"kind"`
	// Thin is the thin event sent for a snapshot event; Snapshot the
	// snapshot event a thin one stands for.
	Thin     string `json:"thin_event,omitempty"`
	Snapshot string `json:"snapshot_event,omitempty"`
	Account  string `json:"account,omitempty"`
	// pending, delivered, failed, dropped, none (no webhook URL), thin_only
	// (no destination asks for the snapshot: see Thin).
	Status     string    `json:"status"`
	Attempts   int       `json:"attempts"`
	LastStatus int       `json:"last_http_status,omitempty"`
	LastError  string    `json:"last_error,omitempty"`
	Created    time.Time `json:"created"`
}

// New returns a local Stripe; serve Handler. Close stops its deliveries
// and settlements.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.MaxAttempts < 1 {
		cfg.MaxAttempts = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	fake := stripetest.NewHandler(stripetest.Options{Now: cfg.Now})
	fake.TestCards = true
	fake.Decide = func(p stripetest.PI) stripetest.Behavior {
		return stripetest.TestPaymentMethod(p.PaymentMethod).Behavior
	}
	fake.DeclineWith = func(p stripetest.PI) stripetest.CardError { return stripetest.TestPaymentMethod(p.PaymentMethod).Error }
	s := &Server{cfg: cfg, fake: fake, deliveries: map[string]*Delivery{}, payloads: map[string][]byte{},
		settlements: map[string]settlement{}, timers: map[*time.Timer]struct{}{}}
	if cfg.Account != "" {
		fake.Put("", stripetest.Account(cfg.Account, "custom", "", cfg.Now().Unix()))
	}
	fake.Wrap(s.middleware)
	if cfg.Actions != nil {
		cfg.Actions.notify(s.changed)
	}
	return s
}

// SetWebhookURL changes where events are delivered from now on (a test
// knows its service's address only once it listens).
func (s *Server) SetWebhookURL(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.WebhookURL = url
}

func (s *Server) webhookURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.WebhookURL
}

// Handler serves the Stripe API.
func (s *Server) Handler() http.Handler { return s.fake }

// Fake is the underlying fake (its objects, requests, Events API).
func (s *Server) Fake() *stripetest.Stripe { return s.fake }

// Close stops pending retries and settlements and waits for deliveries in
// flight; with a state file, it saves the state last (the retries and
// settlements it stopped are in it, and run again after Open).
func (s *Server) Close() {
	defer s.stopSaving()
	s.mu.Lock()
	s.closed = true
	for t := range s.timers {
		if t.Stop() { // it never runs: its wg.Done is ours
			s.wg.Done()
		}
	}
	s.timers = map[*time.Timer]struct{}{}
	s.mu.Unlock()
	s.wg.Wait()
}

// after runs fn after d unless the server closes first.
func (s *Server) after(d time.Duration, fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	var t *time.Timer
	s.wg.Add(1)
	t = time.AfterFunc(d, func() {
		defer s.wg.Done()
		s.mu.Lock()
		_, live := s.timers[t]
		delete(s.timers, t)
		s.mu.Unlock()
		if live {
			fn()
		}
	})
	s.timers[t] = struct{}{}
}

// middleware: keys, Stripe-Context, the local routes, and the events of
// what the fake did (never for an idempotent replay).
func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if user, _, ok := r.BasicAuth(); ok { // curl -u sk_test_…:
			key = user
			r.Header.Set("Authorization", "Bearer "+key)
		}
		switch {
		case strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_live_"):
			writeError(w, http.StatusUnauthorized, "This is the local Stripe, which is test mode only: live keys are refused. Use any sk_test_ key.")
			return
		case !strings.HasPrefix(key, "sk_test_") && !strings.HasPrefix(key, "rk_test_"):
			writeError(w, http.StatusUnauthorized, "Invalid API Key provided: the local Stripe accepts any sk_test_ key.")
			return
		}
		if ctx := r.Header.Get("Stripe-Context"); ctx != "" && r.Header.Get("Stripe-Account") == "" {
			r.Header.Set("Stripe-Account", ctx)
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		body := rec.Body.Bytes()
		_, _ = w.Write(body)
		if r.Method == http.MethodPost && rec.Header().Get("Idempotent-Replayed") == "" && rec.Code < 500 {
			s.observe(r.Header.Get("Stripe-Account"), r.URL.Path, rec.Code, body)
		}
		if r.Method != http.MethodGet {
			s.changed()
		}
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": msg}})
}

// observe emits the events of one POST the fake answered.
func (s *Server) observe(account, path string, status int, body []byte) {
	var doc map[string]any
	if json.Unmarshal(body, &doc) != nil {
		return
	}
	if e, ok := doc["error"].(map[string]any); ok { // a decline carries its PaymentIntent
		if pi, ok := e["payment_intent"].(map[string]any); ok && status == http.StatusPaymentRequired {
			if path == "/v1/payment_intents" { // created and confirmed at once
				s.emit(account, "payment_intent.created", pi)
			}
			s.emit(account, "payment_intent.payment_failed", pi)
			if inv, _ := pi["invoice"].(string); inv != "" {
				if obj := s.fake.Object(inv); obj != nil {
					s.emit(account, "invoice.payment_failed", obj)
				}
			}
		}
		return
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) == 2 && parts[1] == "customers":
		s.emit(account, "customer.created", doc)
	case len(parts) == 2 && parts[1] == "accounts":
		s.emit("", "account.updated", doc)
	case len(parts) == 2 && parts[1] == "payment_intents",
		len(parts) == 4 && parts[1] == "payment_intents" && parts[3] == "confirm":
		if len(parts) == 2 {
			s.emit(account, "payment_intent.created", doc)
		}
		s.paymentIntentChanged(account, doc)
	case len(parts) == 4 && parts[1] == "invoices" && parts[3] == "finalize":
		s.emit(account, "invoice.finalized", doc)
	case len(parts) == 4 && parts[1] == "invoices" && parts[3] == "pay":
		if pi, _, ok := s.fake.PaymentIntent(str(doc["payment_intent"])); ok {
			s.paymentIntentChanged(account, pi)
		}
		if doc["status"] == "paid" {
			s.emit(account, "invoice.paid", doc)
		}
	case len(parts) == 2 && parts[1] == "subscriptions":
		s.emit(account, "customer.subscription.created", doc)
	case len(parts) == 4 && parts[1] == "payment_intents" && parts[3] == "cancel":
		s.emit(account, "payment_intent.canceled", doc)
	case len(parts) == 2 && parts[1] == "refunds":
		if p, ok := s.fake.Get(str(doc["payment_intent"])); ok { // the charge, as Stripe's charge.refunded carries it
			var ev struct {
				Data struct {
					Object map[string]any `json:"object"`
				} `json:"data"`
			}
			if json.Unmarshal(s.fake.Event(p, "charge.refunded", s.cfg.Now()), &ev) == nil {
				s.emit(account, "charge.refunded", ev.Data.Object)
			}
		}
	}
}

// paymentIntentChanged emits the event of a PaymentIntent's status and
// starts a bank debit's settlement.
func (s *Server) paymentIntentChanged(account string, pi map[string]any) {
	switch pi["status"] {
	case "succeeded":
		s.emit(account, "payment_intent.succeeded", pi)
	case "processing":
		s.emit(account, "payment_intent.processing", pi)
		st := settlement{ID: str(pi["id"]), PM: str(pi["payment_method"]), Due: time.Now().Add(s.cfg.ACHDelay)}
		s.mu.Lock()
		s.settlements[st.ID] = st
		s.mu.Unlock()
		s.scheduleSettlement(st)
	case "requires_payment_method":
		if pi["last_payment_error"] != nil {
			s.emit(account, "payment_intent.payment_failed", pi)
		}
	}
}

// scheduleSettlement settles st when it is due.
func (s *Server) scheduleSettlement(st settlement) {
	s.after(max(0, time.Until(st.Due)), func() { s.settle(st.ID, st.PM) })
}

// settle ends a processing bank debit as its payment method says.
func (s *Server) settle(id, pm string) {
	defer func() { // only once settled: a state saved before still has it due
		s.mu.Lock()
		delete(s.settlements, id)
		s.mu.Unlock()
		s.changed()
	}()
	o := stripetest.TestPaymentMethod(pm)
	if _, ok := s.fake.Get(id); ok { // an off-session charge
		p, err := s.fake.Settle(id, o.SettlesOK)
		if err != nil {
			s.cfg.Log.Warn("settle", "payment_intent", id, "error", err)
			return
		}
		s.paymentIntentChanged(p.Account, p.JSON())
		return
	}
	pi, inv, err := s.fake.SettleObject(id, o.SettlesOK, o.Error)
	if err != nil {
		s.cfg.Log.Warn("settle", "payment_intent", id, "error", err)
		return
	}
	_, account, _ := s.fake.PaymentIntent(id)
	s.paymentIntentChanged(account, pi)
	if inv != nil {
		if o.SettlesOK {
			s.emit(account, "invoice.paid", inv)
		} else {
			s.emit(account, "invoice.payment_failed", inv)
		}
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func newEventID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "evt_" + hex.EncodeToString(b)
}

// emit makes an event about obj on account ("" the platform): listed by
// the Events API, then delivered, as a snapshot event, as a thin event
// when ThinTypes asks for its type, or both (SnapshotToo).
func (s *Server) emit(account, typ string, obj map[string]any) {
	now := s.cfg.Now()
	ev := map[string]any{
		"id": newEventID(), "object": "event", "api_version": APIVersion, "created": now.Unix(),
		"livemode": false, "type": typ, "pending_webhooks": 1,
		"request": map[string]any{"id": nil, "idempotency_key": nil},
		"data":    map[string]any{"object": obj},
	}
	if account != "" {
		ev["account"] = account
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		s.cfg.Log.Error("event", "type", typ, "error", err)
		return
	}
	snap := &Delivery{EventID: ev["id"].(string), Type: typ, Kind: "snapshot", Account: account, Status: "pending", Created: now}
	var thin *Delivery
	var thinPayload []byte
	if s.wantsThin(typ) {
		thinPayload = thinEvent(account, typ, obj, now)
		var head struct{ ID string }
		_ = json.Unmarshal(thinPayload, &head)
		thin = &Delivery{EventID: head.ID, Type: "v1." + typ, Kind: "thin", Snapshot: snap.EventID, Account: account, Status: "pending", Created: now}
		snap.Thin = thin.EventID
	}
	// One step under s.mu: a saved state never has an event without its
	// delivery.
	s.mu.Lock()
	s.fake.Add(account, payload)
	s.record(snap, payload)
	if thin != nil {
		s.fake.AddV2(thinPayload, snap.EventID)
		s.record(thin, thinPayload)
	}
	s.mu.Unlock()
	if thin == nil || s.cfg.SnapshotToo {
		s.send(snap, payload)
	} else {
		s.setStatus(snap.EventID, "thin_only", 0, "")
	}
	if thin != nil {
		s.send(thin, thinPayload)
	}
	s.changed()
}

// record keeps a new delivery; s.mu is held.
func (s *Server) record(d *Delivery, payload []byte) {
	s.deliveries[d.EventID] = d
	s.payloads[d.EventID] = payload
	s.order = append(s.order, d.EventID)
}

// send delivers payload, drops it (DropRate), or marks it undeliverable.
func (s *Server) send(d *Delivery, payload []byte) {
	switch {
	case s.webhookURL() == "":
		s.setStatus(d.EventID, "none", 0, "")
	case s.cfg.DropRate > 0 && chance(s.cfg.DropRate):
		s.setStatus(d.EventID, "dropped", 0, "dropped on purpose (LOCAL_STRIPE_DROP_RATE): the poller finds it")
		s.cfg.Log.Info("webhook dropped", "event", d.EventID, "type", d.Type)
	default:
		id := d.EventID
		s.after(0, func() { s.deliver(id, payload, 1) })
	}
}

func chance(p float64) bool {
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	return err == nil && float64(n.Int64()) < p*1_000_000
}

// deliver sends one attempt; a failure (no 2xx) is retried with backoff.
func (s *Server) deliver(id string, payload []byte, attempt int) {
	req, err := http.NewRequest(http.MethodPost, s.webhookURL(), bytes.NewReader(payload))
	if err != nil {
		s.setStatus(id, "failed", 0, err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set("Stripe-Signature", stripetest.Sign(payload, s.cfg.WebhookSecret, s.cfg.Now()))
	code, errText := 0, ""
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		errText = err.Error()
	} else {
		code = resp.StatusCode
		_ = resp.Body.Close()
	}
	s.mu.Lock()
	if d := s.deliveries[id]; d != nil {
		d.Attempts = attempt
	}
	s.mu.Unlock()
	if err == nil && code >= 200 && code < 300 {
		s.setStatus(id, "delivered", code, "")
		s.markDelivered(id)
		return
	}
	if attempt >= s.cfg.MaxAttempts {
		s.setStatus(id, "failed", code, errText)
		s.cfg.Log.Warn("webhook failed, no more retries", "event", id, "attempts", attempt, "status", code, "error", errText)
		return
	}
	s.setStatus(id, "pending", code, errText)
	wait := s.cfg.RetryBase << (attempt - 1)
	s.cfg.Log.Info("webhook failed, retrying", "event", id, "attempt", attempt, "status", code, "error", errText, "retry_in", wait.String())
	s.after(wait, func() { s.deliver(id, payload, attempt+1) })
}

func (s *Server) setStatus(id, status string, code int, errText string) {
	s.mu.Lock()
	if d := s.deliveries[id]; d != nil {
		d.Status, d.LastStatus, d.LastError = status, code, errText
	}
	s.mu.Unlock()
	s.changed()
}

// Deliveries returns every event's delivery state, oldest first.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, *s.deliveries[id])
	}
	return out
}

// delivered: the event reached the webhook, itself or as its thin event;
// s.mu is held.
func (s *Server) delivered(id string) bool {
	d := s.deliveries[id]
	if d != nil && d.Status != "delivered" && d.Thin != "" {
		d = s.deliveries[d.Thin]
	}
	return d != nil && d.Status == "delivered"
}

// markDelivered tells the fake's Events API that the delivery of id
// succeeded (and, for a thin event, that of the snapshot event it stands
// for), so GET /v1/events?delivery_success=false stops listing it.
func (s *Server) markDelivered(id string) {
	s.mu.Lock()
	d := s.deliveries[id]
	s.mu.Unlock()
	if d == nil {
		return
	}
	s.fake.Delivered(d.Account, true, id)
	if d.Snapshot != "" {
		s.fake.Delivered(d.Account, true, d.Snapshot)
	}
}
