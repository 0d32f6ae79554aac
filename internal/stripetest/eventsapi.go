package stripetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// EventsAPI is a fake Stripe Events API (GET /v1/events) speaking Stripe's
// JSON: a list object with data, has_more and url; created[gte|gt|lte|lt]
// filters; limit (1..100, default 10); starting_after / ending_before cursors;
// the Stripe-Account header selecting a connected account (none: the
// platform). Events are listed newest first, as Stripe does. It can answer
// 429 rate_limit errors to test backoff.
type EventsAPI struct {
	Server *httptest.Server
	// Key is the API key the fake expects as a Bearer token.
	Key string

	mu      sync.Mutex
	byAcct  map[string][]apiEvent // "" is the platform; sorted newest first
	pos     map[string]map[string]int
	seq     int
	omitAcc bool
	limit   func(n int) bool
	stats   APIStats
}

// APIStats counts what the fake served.
type APIStats struct {
	Requests    int            // every request, 429s included
	RateLimited int            // 429 answers
	ByAccount   map[string]int // successful list requests per Stripe-Account ("" platform)
	Times       []time.Time    // arrival time of every request
}

type apiEvent struct {
	id      string
	created int64
	seq     int
	raw     []byte
}

// NewEventsAPI starts the fake; it is closed when the test ends.
func NewEventsAPI(t testing.TB) *EventsAPI {
	t.Helper()
	f := &EventsAPI{Key: "sk_test_poller_fake", byAcct: map[string][]apiEvent{}, stats: APIStats{ByAccount: map[string]int{}}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Server.Close)
	return f
}

// URL is the base URL to use as STRIPE_API_BASE.
func (f *EventsAPI) URL() string { return f.Server.URL }

// Add makes events listable on account ("" for the platform). Each event's
// id and created come from its payload. Adding later than a poll models an
// event that became listable late.
func (f *EventsAPI) Add(account string, payloads ...[]byte) {
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
		f.seq++
		added[i].seq = f.seq
	}
	list := append(f.byAcct[account], added...)
	// Newest first; within one second, the later addition first.
	sort.SliceStable(list, func(i, j int) bool {
		if list[i].created != list[j].created {
			return list[i].created > list[j].created
		}
		return list[i].seq > list[j].seq
	})
	f.byAcct[account] = list
	delete(f.pos, account)
}

// positions maps the ids of account's list to their index; f.mu is held.
func (f *EventsAPI) positions(account string) map[string]int {
	if f.pos == nil {
		f.pos = map[string]map[string]int{}
	}
	if pos, ok := f.pos[account]; ok {
		return pos
	}
	pos := make(map[string]int, len(f.byAcct[account]))
	for i, ev := range f.byAcct[account] {
		pos[ev.id] = i
	}
	f.pos[account] = pos
	return pos
}

// OmitAccount makes connected-account listings drop the events' `account`
// field, so callers must not rely on it.
func (f *EventsAPI) OmitAccount(omit bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.omitAcc = omit
}

// RateLimit answers 429 to request number n (1-based, counting every
// request) whenever limit(n) is true; nil turns it off.
func (f *EventsAPI) RateLimit(limit func(n int) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = limit
}

// Stats returns a copy of the counters.
func (f *EventsAPI) Stats() APIStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.ByAccount = map[string]int{}
	for k, v := range f.stats.ByAccount {
		s.ByAccount[k] = v
	}
	s.Times = append([]time.Time(nil), f.stats.Times...)
	return s
}

func (f *EventsAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Requests++
	f.stats.Times = append(f.stats.Times, time.Now())
	if r.Header.Get("Authorization") != "Bearer "+f.Key {
		stripeError(w, http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided")
		return
	}
	if r.Method != http.MethodGet || r.URL.Path != "/v1/events" {
		stripeError(w, http.StatusNotFound, "invalid_request_error", "", "Unrecognized request URL")
		return
	}
	if f.limit != nil && f.limit(f.stats.Requests) {
		f.stats.RateLimited++
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
	all := f.byAcct[account]
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
	f.stats.ByAccount[account]++

	var b strings.Builder
	b.WriteString(`{"object":"list","url":"/v1/events","has_more":`)
	b.WriteString(strconv.FormatBool(hasMore))
	b.WriteString(`,"data":[`)
	for i, ev := range page {
		if i > 0 {
			b.WriteByte(',')
		}
		raw := ev.raw
		if f.omitAcc && account != "" {
			raw = withoutAccount(raw)
		}
		b.Write(raw)
	}
	b.WriteString(`]}`)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", fmt.Sprintf("req_fake_%d", f.stats.Requests))
	_, _ = w.Write([]byte(b.String()))
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
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body := map[string]any{"error": map[string]any{"type": typ, "message": msg}}
	if code != "" {
		body["error"].(map[string]any)["code"] = code
	}
	_ = json.NewEncoder(w).Encode(body)
}
