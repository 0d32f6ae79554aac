package stripetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// The local Stripe (internal/localstripe) keeps its state across a restart
// of `make run`: State renders everything Stripe would still know (objects
// and who owns them, charges, refunds, the answers kept for idempotency
// keys, the Events API v1 and v2, the id counter), Restore puts it back.
// The tests' own bookkeeping (Requests, Stats, scripted failures) is not
// part of it: it describes one run, not Stripe.

// savedState is the JSON of State; its fields are the fake's, exported.
type savedState struct {
	Seq      int64                     `json:"seq"`
	Objects  map[string]map[string]any `json:"objects"`
	Owner    map[string]string         `json:"owner"`
	Created  map[string]int            `json:"created"`
	Replies  map[string]savedReply     `json:"replies"`
	Charges  []PI                      `json:"charges"`
	ByKey    map[string]string         `json:"charges_by_idempotency_key"`
	Saved500 []string                  `json:"saved_500_keys"`
	Cancels  []string                  `json:"cancels"`
	Refunds  []Refunded                `json:"refunds"`
	Events   map[string][]savedEvent   `json:"events"` // by account, "" the platform; newest first
	EventSeq int                       `json:"event_seq"`
	V2       []savedV2                 `json:"v2_events"` // oldest first
}

type savedReply struct {
	Status int    `json:"status"`
	Body   []byte `json:"body"`
}

type savedEvent struct {
	ID      string          `json:"id"`
	Created int64           `json:"created"`
	Seq     int             `json:"seq"`
	Raw     json.RawMessage `json:"raw"`
}

type savedV2 struct {
	ID      string          `json:"id"`
	Context string          `json:"context,omitempty"`
	Created time.Time       `json:"created"`
	Raw     json.RawMessage `json:"raw"`
}

// State renders the fake's Stripe-side state as JSON (Restore reads it).
func (f *Stripe) State() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := savedState{Seq: f.seq.Load(), Objects: f.objects, Owner: f.owner, Created: f.created,
		Replies: make(map[string]savedReply, len(f.replies)), ByKey: f.charges.byKey,
		Cancels: f.charges.cancels, Refunds: f.charges.refunds,
		Events: make(map[string][]savedEvent, len(f.events.byAcct)), EventSeq: f.events.seq}
	for k, r := range f.replies {
		s.Replies[k] = savedReply{Status: r.status, Body: r.body}
	}
	for _, id := range f.charges.order {
		s.Charges = append(s.Charges, *f.charges.pis[id])
	}
	for k, ok := range f.charges.saved500 {
		if ok {
			s.Saved500 = append(s.Saved500, k)
		}
	}
	for acct, list := range f.events.byAcct {
		out := make([]savedEvent, len(list))
		for i, ev := range list {
			out[i] = savedEvent{ID: ev.id, Created: ev.created, Seq: ev.seq, Raw: ev.raw}
		}
		s.Events[acct] = out
	}
	for _, id := range f.v2.order {
		ev := f.v2.byID[id]
		s.V2 = append(s.V2, savedV2{ID: id, Context: ev.context, Created: ev.created, Raw: ev.raw})
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("stripetest: render state: %w", err)
	}
	return b, nil
}

// Restore replaces the fake's Stripe-side state with what State rendered.
func (f *Stripe) Restore(b []byte) error {
	var s savedState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // objects' amounts are int64, as the routes make them
	if err := dec.Decode(&s); err != nil {
		return fmt.Errorf("stripetest: read state: %w", err)
	}
	objects := make(map[string]map[string]any, len(s.Objects))
	for id, obj := range s.Objects {
		objects[id] = integers(obj).(map[string]any)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq.Store(s.Seq)
	f.objects, f.owner, f.created = objects, orEmpty(s.Owner), orEmptyInt(s.Created)
	f.replies = make(map[string]reply, len(s.Replies))
	for k, r := range s.Replies {
		f.replies[k] = reply{status: r.Status, body: r.Body}
	}
	f.charges.init()
	for i := range s.Charges {
		p := s.Charges[i]
		f.charges.pis[p.ID] = &p
		f.charges.order = append(f.charges.order, p.ID)
	}
	for k, v := range s.ByKey {
		f.charges.byKey[k] = v
	}
	for _, k := range s.Saved500 {
		f.charges.saved500[k] = true
	}
	f.charges.cancels, f.charges.refunds = s.Cancels, s.Refunds
	f.events.byAcct, f.events.pos, f.events.seq = map[string][]apiEvent{}, nil, s.EventSeq
	for acct, list := range s.Events {
		out := make([]apiEvent, len(list))
		for i, ev := range list {
			out[i] = apiEvent{id: ev.ID, created: ev.Created, seq: ev.Seq, raw: ev.Raw}
		}
		f.events.byAcct[acct] = out
	}
	f.v2.byID, f.v2.order = map[string]v2Event{}, nil
	for _, ev := range s.V2 {
		f.v2.byID[ev.ID] = v2Event{context: ev.Context, created: ev.Created, raw: ev.Raw}
		f.v2.order = append(f.v2.order, ev.ID)
	}
	return nil
}

// integers turns decoded JSON numbers back into int64 (float64 when not
// whole), as the routes store them.
func integers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		n, _ := x.Float64()
		return n
	case map[string]any:
		for k, e := range x {
			x[k] = integers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = integers(e)
		}
		return x
	}
	return v
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func orEmptyInt(m map[string]int) map[string]int {
	if m == nil {
		return map[string]int{}
	}
	return m
}
