package stripetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The Events API (GET /v1/events, and GET /v1/events/{id} for one) speaks Stripe's JSON: a list object with
// data, has_more and url; created[gte|gt|lte|lt] filters; limit (1..100,
// default 10); starting_after / ending_before cursors; the Stripe-Account
// header selecting a connected account (none: the platform). Events are
// listed newest first, as Stripe does. It can answer 429 rate_limit errors
// to test backoff. delivery_success=true|false keeps the events whose
// webhook delivery succeeded (or not: pending or failed), filtered before
// paging as Stripe does, so a page holds up to limit matching events and the
// cursors are matching events' ids. An event is undelivered until Delivered
// says otherwise (Stripe counts a pending delivery as not successful).

// APIStats counts what the Events API (/v1/events…) served.
type APIStats struct {
	Requests    int            // every Events API request, 401s and 429s included
	RateLimited int            // 429 answers
	ByAccount   map[string]int // successful list requests per Stripe-Account ("" platform)
	Times       []time.Time    // arrival time of every Events API request
}

// eventList is what the Events API lists; guarded by Stripe.mu.
type eventList struct {
	byAcct  map[string][]apiEvent // "" is the platform; sorted newest first
	pos     map[string]map[string]int
	seq     int
	omitAcc bool
	limit   func(n int) bool
	stats   APIStats
}

func (l *eventList) init() {
	l.byAcct, l.stats = map[string][]apiEvent{}, APIStats{ByAccount: map[string]int{}}
}

// arrived counts one request to /v1/events… and returns its number.
func (l *eventList) arrived(at time.Time) int {
	l.stats.Requests++
	l.stats.Times = append(l.stats.Times, at)
	return l.stats.Requests
}

type apiEvent struct {
	id        string
	created   int64
	seq       int
	delivered bool // its webhook delivery succeeded (delivery_success)
	raw       []byte
}

// Add makes events listable on account ("" for the platform). Each event's
// id and created come from its payload. Adding later than a poll models an
// event that became listable late.
func (f *Stripe) Add(account string, payloads ...[]byte) {
	added := make([]apiEvent, 0, len(payloads))
	for _, payload := range payloads {
		var head struct {
			ID      string `json:"id"`
			Created int64  `json:"created"`
		}
		if err := json.Unmarshal(payload, &head); err != nil || head.ID == "" {
			panic(fmt.Sprintf("stripetest: not an event: %v", err))
		}
		added = append(added, apiEvent{id: head.ID, created: head.Created, raw: payload})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range added {
		f.events.seq++
		added[i].seq = f.events.seq
	}
	list := append(f.events.byAcct[account], added...)
	// Newest first; within one second, the later addition first.
	sort.SliceStable(list, func(i, j int) bool {
		if list[i].created != list[j].created {
			return list[i].created > list[j].created
		}
		return list[i].seq > list[j].seq
	})
	f.events.byAcct[account] = list
	delete(f.events.pos, account)
}

// positions maps the ids of account's list to their index; f.mu is held.
func (f *Stripe) positions(account string) map[string]int {
	if f.events.pos == nil {
		f.events.pos = map[string]map[string]int{}
	}
	if pos, ok := f.events.pos[account]; ok {
		return pos
	}
	pos := make(map[string]int, len(f.events.byAcct[account]))
	for i, ev := range f.events.byAcct[account] {
		pos[ev.id] = i
	}
	f.events.pos[account] = pos
	return pos
}

// Delivered records whether the webhook delivery of account's events ids
// succeeded, as delivery_success lists them.
func (f *Stripe) Delivered(account string, ok bool, ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pos := f.positions(account)
	for _, id := range ids {
		if i, found := pos[id]; found {
			f.events.byAcct[account][i].delivered = ok
		}
	}
}

// OmitAccount makes connected-account listings drop the events' `account`
// field, so callers must not rely on it.
func (f *Stripe) OmitAccount(omit bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events.omitAcc = omit
}

// RateLimit answers 429 to Events API request number n (1-based, counting
// every one, as Stats does) whenever limit(n) is true; nil turns it off.
func (f *Stripe) RateLimit(limit func(n int) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events.limit = limit
}

// Stats returns a copy of the counters.
func (f *Stripe) Stats() APIStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.events.stats
	s.ByAccount = map[string]int{}
	for k, v := range f.events.stats.ByAccount {
		s.ByAccount[k] = v
	}
	s.Times = append([]time.Time(nil), f.events.stats.Times...)
	return s
}

// listEvents is GET /v1/events; n is the request's number (RateLimit).
func (f *Stripe) listEvents(w http.ResponseWriter, r *http.Request, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/events/"); ok && r.Method == http.MethodGet {
		f.retrieveEvent(w, r.Header.Get("Stripe-Account"), id)
		return
	}
	if r.Method != http.MethodGet || r.URL.Path != "/v1/events" {
		stripeError(w, http.StatusNotFound, "invalid_request_error", "", "Unrecognized request URL")
		return
	}
	if f.events.limit != nil && f.events.limit(n) {
		f.events.stats.RateLimited++
		stripeError(w, http.StatusTooManyRequests, "invalid_request_error", "rate_limit",
			"Too many requests hit the API too quickly. We recommend an exponential backoff of your requests.")
		return
	}
	q := r.URL.Query()
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			stripeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid_integer", "limit must be between 1 and 100")
			return
		}
		limit = n
	}
	// The list is sorted newest first: each created bound is a binary search.
	account := r.Header.Get("Stripe-Account")
	all := f.events.byAcct[account]
	lo, hi := 0, len(all)
	for _, op := range []string{"gte", "gt", "lte", "lt"} {
		v := q.Get("created[" + op + "]")
		if v == "" {
			continue
		}
		bound, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			stripeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid_integer", "created["+op+"] must be an integer")
			return
		}
		switch op {
		case "gte": // keep created >= bound: cut the tail
			hi = min(hi, sort.Search(len(all), func(i int) bool { return all[i].created < bound }))
		case "gt":
			hi = min(hi, sort.Search(len(all), func(i int) bool { return all[i].created <= bound }))
		case "lte": // keep created <= bound: cut the head
			lo = max(lo, sort.Search(len(all), func(i int) bool { return all[i].created <= bound }))
		case "lt":
			lo = max(lo, sort.Search(len(all), func(i int) bool { return all[i].created < bound }))
		}
	}
	matching := all[lo:max(lo, hi)]
	pos := f.positions(account)
	index := func(id string) int {
		if i, ok := pos[id]; ok && i >= lo && i < lo+len(matching) {
			return i - lo
		}
		return -1
	}
	if v := q.Get("delivery_success"); v != "" {
		if v != "true" && v != "false" {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", "Invalid boolean: "+v, map[string]any{"param": "delivery_success"})
			return
		}
		// Stripe filters before paging: the cursors are matching events.
		want := v == "true"
		kept := make([]apiEvent, 0, len(matching)/8)
		for _, ev := range matching {
			if ev.delivered == want {
				kept = append(kept, ev)
			}
		}
		matching = kept
		index = func(id string) int {
			for i, ev := range matching {
				if ev.id == id {
					return i
				}
			}
			return -1
		}
	}
	var page []apiEvent
	hasMore := false
	switch after, before := q.Get("starting_after"), q.Get("ending_before"); {
	case after != "" && before != "":
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "", "You may only specify one of these parameters: ending_before, starting_after.")
		return
	case after != "":
		i := index(after)
		if i < 0 {
			stripeError(w, http.StatusBadRequest, "invalid_request_error", "resource_missing", "No such event: '"+after+"'")
			return
		}
		rest := matching[i+1:]
		page, hasMore = rest[:min(limit, len(rest))], len(rest) > limit
	case before != "":
		// The page just newer than the cursor, still newest first.
		i := index(before)
		if i < 0 {
			stripeError(w, http.StatusBadRequest, "invalid_request_error", "resource_missing", "No such event: '"+before+"'")
			return
		}
		head := matching[:i]
		page, hasMore = head[max(0, len(head)-limit):], len(head) > limit
	default:
		page, hasMore = matching[:min(limit, len(matching))], len(matching) > limit
	}
	f.events.stats.ByAccount[account]++

	var b strings.Builder
	b.WriteString(`{"object":"list","url":"/v1/events","has_more":`)
	b.WriteString(strconv.FormatBool(hasMore))
	b.WriteString(`,"data":[`)
	for i, ev := range page {
		if i > 0 {
			b.WriteByte(',')
		}
		raw := ev.raw
		if f.events.omitAcc && account != "" {
			raw = withoutAccount(raw)
		}
		b.Write(raw)
	}
	b.WriteString(`]}`)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", fmt.Sprintf("req_fake_%d", n))
	_, _ = w.Write([]byte(b.String()))
}

// retrieveEvent is GET /v1/events/{id} on account ("" the platform); f.mu
// is held.
func (f *Stripe) retrieveEvent(w http.ResponseWriter, account, id string) {
	i, ok := f.positions(account)[id]
	if !ok {
		stripeError(w, http.StatusNotFound, "invalid_request_error", "resource_missing", "No such event: '"+id+"'")
		return
	}
	raw := f.events.byAcct[account][i].raw
	if f.events.omitAcc && account != "" {
		raw = withoutAccount(raw)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(raw)
}

func withoutAccount(raw []byte) []byte {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return raw
	}
	delete(doc, "account")
	out, err := json.Marshal(doc)
	if err != nil {
		return raw
	}
	return out
}

func stripeError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeError(w, status, typ, code, msg, nil)
}
