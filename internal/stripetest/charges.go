package stripetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Behavior is what the fake does with one new confirmed PaymentIntent (an
// off-session charge of the billing core).
type Behavior int

const (
	// Succeed: status succeeded.
	Succeed Behavior = iota
	// Decline: 402 card_declined; the PI is requires_payment_method.
	Decline
	// Process: status processing (a bank debit); settle it with Settle.
	Process
	// Lost: Stripe acts (the outcome LostAs picks, default Succeed) but
	// the response is a 500, as if the connection broke after Stripe
	// acted. The idempotency key keeps the PaymentIntent: a retry with the
	// same key gets it back.
	Lost
	// Fail500: a 500 before anything happened (nothing stored).
	Fail500
	// Acted500: Stripe acted (the PaymentIntent exists, with the outcome
	// ActedAs picks) but answered 500 and saved that answer for the key:
	// a resend with the same key gets the 500 again, as Stripe replays a
	// saved 500. Only asking for the PaymentIntent (search, list) finds it.
	Acted500
)

// PI is one confirmed PaymentIntent the fake created.
type PI struct {
	ID      string
	Account string
	// AccountHeader: the create request carried a Stripe-Account header
	// (a charge on the platform's own account must not).
	AccountHeader  bool
	Customer       string
	PaymentMethod  string
	Amount         int64
	Currency       string
	Status         string
	Metadata       map[string]string
	IdempotencyKey string
	Refunded       bool
	Created        time.Time
	DeclineCode    string
	// ErrorCode and ErrorMessage of a decline (default card_declined,
	// "Your card has insufficient funds."): Stripe.DeclineWith picks them.
	ErrorCode    string
	ErrorMessage string
}

// charges are the confirmed PaymentIntents; guarded by Stripe.mu.
type charges struct {
	pis      map[string]*PI
	order    []string
	byKey    map[string]string // idempotency key → PI id
	saved500 map[string]bool   // idempotency keys whose saved answer is a 500
	cancels  []string          // payable.go
	refunds  []Refunded
}

func (c *charges) init() {
	c.pis, c.byKey, c.saved500 = map[string]*PI{}, map[string]string{}, map[string]bool{}
}

// isCharge: a PaymentIntent created with confirm or off_session (the
// billing core's charges; the purchase API creates unconfirmed ones).
func isCharge(r Request) bool {
	return r.Method == http.MethodPost && r.Path == "/v1/payment_intents" &&
		(r.Form.Has("confirm") || r.Form.Has("off_session"))
}

func (f *Stripe) createCharge(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	if f.charges.saved500[key] && key != "" {
		f.mu.Unlock()
		writeError(w, http.StatusInternalServerError, "api_error", "", "internal error (replayed)", nil)
		return
	}
	if id, ok := f.charges.byKey[key]; ok && key != "" {
		p := f.charges.pis[id]
		f.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		f.respond(w, r.PostForm, p, false)
		return
	}
	f.mu.Unlock()
	amount, _ := strconv.ParseInt(r.PostForm.Get("amount"), 10, 64)
	p := &PI{
		ID: fmt.Sprintf("pi_fake%08d", f.seq.Add(1)), Account: r.Header.Get("Stripe-Account"), AccountHeader: len(r.Header.Values("Stripe-Account")) > 0,
		Customer: r.PostForm.Get("customer"), PaymentMethod: r.PostForm.Get("payment_method"),
		Amount: amount, Currency: r.PostForm.Get("currency"), Metadata: map[string]string{},
		IdempotencyKey: key, Created: f.now(),
	}
	for k, v := range r.PostForm {
		if strings.HasPrefix(k, "metadata[") && strings.HasSuffix(k, "]") && len(v) > 0 {
			p.Metadata[strings.TrimSuffix(strings.TrimPrefix(k, "metadata["), "]")] = v[0]
		}
	}
	if r.PostForm.Get("confirm") != "true" || r.PostForm.Get("off_session") != "true" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_missing", "want confirm and off_session", nil)
		return
	}
	behavior := Succeed
	if f.Decide != nil {
		behavior = f.Decide(*p)
	}
	if behavior == Fail500 {
		writeError(w, http.StatusInternalServerError, "api_error", "", "internal error", nil)
		return
	}
	acted, lost := behavior == Acted500, behavior == Lost
	switch {
	case acted && f.ActedAs != nil:
		behavior = f.ActedAs(*p)
	case lost && f.LostAs != nil:
		behavior = f.LostAs(*p)
	case acted || lost:
		behavior = Succeed
	}
	switch behavior {
	case Decline:
		p.Status = "requires_payment_method"
		f.declined(p)
		f.declinedAs(p)
	case Process:
		p.Status = "processing"
	default:
		p.Status = "succeeded"
	}
	f.mu.Lock()
	// A concurrent request with the same key lost the race: answer with the
	// winner, as Stripe would (it answers 409 while one is in progress).
	if id, ok := f.charges.byKey[key]; ok && key != "" {
		existing := f.charges.pis[id]
		f.mu.Unlock()
		f.respond(w, r.PostForm, existing, false)
		return
	}
	f.charges.pis[p.ID] = p
	f.charges.order = append(f.charges.order, p.ID)
	if key != "" {
		f.charges.byKey[key] = p.ID
		if acted {
			f.charges.saved500[key] = true
		}
	}
	f.mu.Unlock()
	f.respond(w, r.PostForm, p, lost || acted)
}

// respond answers a charge as it is now: a decline is a 402 card error
// carrying the PaymentIntent, as Stripe's is.
func (f *Stripe) respond(w http.ResponseWriter, form url.Values, p *PI, lost bool) {
	f.mu.Lock()
	body := f.expand(form, "", p, p.JSON())
	status := p.Status
	f.mu.Unlock()
	switch {
	case lost:
		writeError(w, http.StatusInternalServerError, "api_error", "", "connection reset", nil)
	case status == "requires_payment_method":
		ce := p.cardError()
		writeError(w, http.StatusPaymentRequired, "card_error", ce.Code, ce.Message,
			map[string]any{"payment_intent": body, "decline_code": ce.DeclineCode})
	default:
		writeJSON(w, body)
	}
}

// charge returns the JSON of a charge visible to account; f.mu is held.
func (f *Stripe) charge(account, id string, form url.Values) (map[string]any, bool) {
	p, ok := f.charges.pis[id]
	if !ok || p.Account != account { // another account's objects do not exist
		return nil, false
	}
	return f.expand(form, "", p, p.JSON()), true
}

// JSON is the PaymentIntent as Stripe renders it (the fields the service
// and stripe-go read).
func (p *PI) JSON() map[string]any {
	body := map[string]any{
		"id": p.ID, "object": "payment_intent", "amount": p.Amount, "currency": p.Currency,
		"customer": p.Customer, "payment_method": p.PaymentMethod, "status": p.Status,
		"metadata": p.Metadata, "livemode": false, "created": p.Created.Unix(),
		"latest_charge": "ch_" + strings.TrimPrefix(p.ID, "pi_"), "last_payment_error": nil,
	}
	if p.Status == "requires_payment_method" {
		ce := p.cardError()
		body["last_payment_error"] = map[string]any{"type": "card_error", "code": ce.Code,
			"decline_code": ce.DeclineCode, "message": ce.Message}
	}
	return body
}

// PIs returns copies of every confirmed PaymentIntent, in creation order.
func (f *Stripe) PIs() []PI {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]PI, 0, len(f.charges.order))
	for _, id := range f.charges.order {
		out = append(out, *f.charges.pis[id])
	}
	return out
}

// Get returns one confirmed PaymentIntent.
func (f *Stripe) Get(id string) (PI, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.charges.pis[id]
	if !ok {
		return PI{}, false
	}
	return *p, true
}

// Settle ends a processing PaymentIntent: succeeded or failed.
func (f *Stripe) Settle(id string, ok bool) (PI, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.charges.pis[id]
	if p == nil || p.Status != "processing" {
		return PI{}, fmt.Errorf("%s is not processing", id)
	}
	if ok {
		p.Status = "succeeded"
	} else {
		p.Status = "requires_payment_method"
		p.ErrorCode, p.DeclineCode, p.ErrorMessage = insufficientFunds.Code, insufficientFunds.DeclineCode, insufficientFunds.Message
	}
	return *p, nil
}

// Refund refunds a succeeded PaymentIntent in full.
func (f *Stripe) Refund(id string) (PI, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.charges.pis[id]
	if p == nil || p.Status != "succeeded" || p.Refunded {
		return PI{}, fmt.Errorf("%s cannot be refunded", id)
	}
	p.Refunded = true
	return *p, nil
}

// Event renders a Stripe event about p: "payment_intent.<x>" carries the
// PaymentIntent, "charge.refunded" its charge (with the PaymentIntent's
// metadata, as Stripe copies it).
func (f *Stripe) Event(p PI, typ string, created time.Time) []byte {
	var obj map[string]any
	if typ == "charge.refunded" {
		obj = map[string]any{
			"id": "ch_" + strings.TrimPrefix(p.ID, "pi_"), "object": "charge", "amount": p.Amount,
			"amount_refunded": p.Amount, "refunded": true, "currency": p.Currency, "payment_intent": p.ID,
			"metadata": p.Metadata, "status": "succeeded", "paid": true, "captured": true, "livemode": false,
		}
	} else {
		obj = p.JSON()
	}
	ev := map[string]any{
		"id": fmt.Sprintf("evt_fake%08d", f.seq.Add(1)), "object": "event", "api_version": "2023-10-16",
		"created": created.Unix(), "livemode": false, "type": typ, "pending_webhooks": 1,
		"data": map[string]any{"object": obj},
	}
	if p.Account != "" {
		ev["account"] = p.Account
	}
	b, _ := json.Marshal(ev)
	return b
}

// Successful counts, per "account/subscription/billing date" of the
// billing metadata, the PaymentIntents that succeeded (refunded or not).
func (f *Stripe) Successful() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]string{}
	for _, id := range f.charges.order {
		p := f.charges.pis[id]
		if p.Status == "succeeded" {
			k := PeriodKey(p.Metadata["billing_account"], p.Metadata["billing_subscription"], p.Metadata["billing_date"])
			out[k] = append(out[k], p.ID)
		}
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out
}

// PeriodKey names a billing period in test maps.
func PeriodKey(account, sub, date string) string { return account + "/" + sub + "/" + date }

var searchClause = regexp.MustCompile(`^metadata\['([^'\]]+)'\]:'((?:[^'\\]|\\.)*)'$`)

// searchCharges is GET /v1/payment_intents/search: the fake understands
// metadata['key']:'value' clauses joined by AND, on the request's account.
func (f *Stripe) searchCharges(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query().Get("query")
	want := map[string]string{}
	for _, clause := range strings.Split(query, " AND ") {
		m := searchClause.FindStringSubmatch(strings.TrimSpace(clause))
		if m == nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", "unsupported search query: "+query, nil)
			return
		}
		want[m[1]] = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(m[2])
	}
	account := r.Header.Get("Stripe-Account")
	data := []any{}
	f.mu.Lock()
	for _, id := range f.charges.order {
		p := f.charges.pis[id]
		if p.Account != account || f.now().Sub(p.Created) < f.SearchLag {
			continue
		}
		match := true
		for k, v := range want {
			if p.Metadata[k] != v {
				match = false
			}
		}
		if match {
			data = append(data, f.expand(r.URL.Query(), "data.", p, p.JSON()))
		}
	}
	f.mu.Unlock()
	writeJSON(w, map[string]any{"object": "search_result", "url": "/v1/payment_intents/search", "has_more": false,
		"next_page": nil, "data": data})
}

// listCharges is GET /v1/payment_intents?customer=&created[gte]= on the
// request's account, newest first.
func (f *Stripe) listCharges(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	customer := q.Get("customer")
	var since int64
	if v := q.Get("created[gte]"); v != "" {
		since, _ = strconv.ParseInt(v, 10, 64)
	}
	account := r.Header.Get("Stripe-Account")
	data := []any{}
	f.mu.Lock()
	for i := len(f.charges.order) - 1; i >= 0; i-- {
		p := f.charges.pis[f.charges.order[i]]
		if p.Account != account || (customer != "" && p.Customer != customer) || p.Created.Unix() < since {
			continue
		}
		data = append(data, f.expand(q, "data.", p, p.JSON()))
	}
	if customer == "" {
		// Without a customer (the reconciliation's listing), the purchase
		// API's PaymentIntents are listed too, in pages.
		for _, obj := range f.storedObjects(account, "payment_intent", q) {
			data = append(data, obj)
		}
		f.mu.Unlock()
		writeJSON(w, page("/v1/payment_intents", data, q))
		return
	}
	f.mu.Unlock()
	writeJSON(w, map[string]any{"object": "list", "url": "/v1/payment_intents", "has_more": false, "data": data})
}
