package stripetest

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// Thin events: fixtures in the shape Stripe delivers to an event
// destination with the thin payload, and the Events API v2 of the fake
// (GET /v2/core/events/{id}, GET /v2/core/events), which honours
// Stripe-Context as Stripe does: an event of a connected account is found
// only with that account as the context, a platform event only without one.

//go:embed testdata/thin/*.json
var thinFixtures embed.FS

// ThinFixture returns the raw JSON of testdata/thin/<name>.json.
func ThinFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := thinFixtures.ReadFile(path.Join("testdata/thin", name+".json"))
	if err != nil {
		t.Fatalf("thin fixture %s: %v", name, err)
	}
	return b
}

// ThinFixtureNames lists every thin fixture.
func ThinFixtureNames() []string {
	entries, _ := thinFixtures.ReadDir("testdata/thin")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	return names
}

// NewThinID returns a unique id in the shape of Stripe's v2 event ids.
func NewThinID() string {
	return "evt_test_65" + strings.ReplaceAll(uuid.NewString(), "-", "")[:24]
}

// Thin is a thin fixture with fields overridden: zero values keep the
// fixture's.
type Thin struct {
	Fixture string
	ID      string    // default: a fresh unique id
	Context *string   // nil keeps the fixture's; "" removes it (platform)
	Created time.Time // default: now
	// RelatedID replaces related_object.id (and its url's last segment).
	RelatedID string
	Livemode  *bool
}

// Build renders the notification as JSON.
func (e Thin) Build(t testing.TB) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(ThinFixture(t, e.Fixture), &doc); err != nil {
		t.Fatalf("thin fixture %s: %v", e.Fixture, err)
	}
	id := e.ID
	if id == "" {
		id = NewThinID()
	}
	doc["id"] = id
	if e.Context != nil {
		if *e.Context == "" {
			delete(doc, "context")
		} else {
			doc["context"] = *e.Context
		}
	}
	created := e.Created
	if created.IsZero() {
		created = time.Now()
	}
	doc["created"] = created.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	if e.Livemode != nil {
		doc["livemode"] = *e.Livemode
	}
	if e.RelatedID != "" {
		ro, _ := doc["related_object"].(map[string]any)
		if ro == nil {
			t.Fatalf("thin fixture %s has no related_object", e.Fixture)
		}
		ro["id"] = e.RelatedID
		if u, ok := ro["url"].(string); ok {
			ro["url"] = u[:strings.LastIndexByte(u, '/')+1] + e.RelatedID
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("thin event: %v", err)
	}
	return b
}

// HealthResolved is the `data` of a
// v2.core.health.event_generation_failure.resolved event as Stripe's copy
// has it (stripe-go, stripe-node, stripe-python's
// V2CoreHealthEventGenerationFailureResolvedEventData): the object Stripe
// failed to generate an event for is data.impact.related_object
// {id, type, url}, on the account data.impact.context (absent for the
// platform), for the type data.impact.event_type; data.severity is
// critical or non_critical.
type HealthResolved struct {
	Context    string // the connected account; "" the platform
	EventType  string // default payment_intent.succeeded
	ObjectID   string
	ObjectType string // default payment_intent
	Severity   string // "" leaves it out
}

// Data renders it as Stripe does.
func (h HealthResolved) Data() map[string]any {
	typ, evType := h.ObjectType, h.EventType
	if typ == "" {
		typ = "payment_intent"
	}
	if evType == "" {
		evType = typ + ".succeeded"
	}
	path := typ + "s"
	impact := map[string]any{"event_type": evType,
		"related_object": map[string]any{"id": h.ObjectID, "type": typ, "url": "/v1/" + path + "/" + h.ObjectID}}
	if h.Context != "" {
		impact["context"] = h.Context
	}
	data := map[string]any{
		"alert_id": "alert_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16], "grouping_key": "event_generation_failure",
		"impact": impact, "resolved_at": time.Now().UTC().Format(time.RFC3339),
		"summary": "Stripe could not generate some events; they are available again.",
	}
	if h.Severity != "" {
		data["severity"] = h.Severity
	}
	return data
}

// v2Events is the fake's Events API v2; guarded by Stripe.mu.
type v2Events struct {
	byID  map[string]v2Event
	order []string // oldest first
	delay time.Duration
}

type v2Event struct {
	context string
	created time.Time
	raw     []byte
}

// AddV2 makes a thin event retrievable and listable on the Events API v2,
// as Stripe returns it: the notification plus `snapshot_event` (the v1
// event it stands for; "" for a v2 type) and `data` and `changes`.
func (f *Stripe) AddV2(notification []byte, snapshotEvent string) {
	f.AddV2Data(notification, snapshotEvent, nil)
}

// AddV2Data is AddV2 with the event's `data` (a thin notification never
// carries it: only Stripe's copy of the event does); nil is {}.
func (f *Stripe) AddV2Data(notification []byte, snapshotEvent string, data map[string]any) {
	f.v2Add(V2Copy(notification, snapshotEvent, data))
}

// V2Copy is Stripe's copy of the thin event notification names, as
// GET /v2/core/events/{id} returns it (see AddV2Data).
func V2Copy(notification []byte, snapshotEvent string, data map[string]any) []byte {
	var doc map[string]any
	if err := json.Unmarshal(notification, &doc); err != nil {
		panic(fmt.Sprintf("stripetest: not a thin event: %v", err))
	}
	if snapshotEvent != "" {
		doc["snapshot_event"] = snapshotEvent
	}
	if data != nil {
		doc["data"] = data
	}
	if _, ok := doc["data"]; !ok {
		doc["data"] = map[string]any{}
	}
	if _, ok := doc["changes"]; !ok {
		doc["changes"] = nil
	}
	raw, _ := json.Marshal(doc)
	return raw
}

// v2Add stores a copy made by V2Copy.
func (f *Stripe) v2Add(raw []byte) {
	var doc map[string]any
	_ = json.Unmarshal(raw, &doc) // V2Copy's own output
	id, _ := doc["id"].(string)
	ctx, _ := doc["context"].(string)
	created, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(doc["created"]))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.v2.byID == nil {
		f.v2.byID = map[string]v2Event{}
	}
	if _, ok := f.v2.byID[id]; !ok {
		f.v2.order = append(f.v2.order, id)
	}
	f.v2.byID[id] = v2Event{context: ctx, created: created, raw: raw}
}

// DelayV2 makes every Events API v2 answer wait d first (a timeout).
func (f *Stripe) DelayV2(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.v2.delay = d
}

// Hang makes the next `times` requests to method+path under /v2/ (times <
// 0: all) never answer: the client's timeout (a hydration timing out)
// ends them.
func (f *Stripe) Hang(method, path string, times int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = append(f.fails, &failure{method: method, path: path, status: hangStatus, times: times})
}

// hangStatus marks a scripted failure that never answers (Hang).
const hangStatus = 0

// serveV2 answers /v2/…; Fail, Answer and Hang apply to it.
func (f *Stripe) serveV2(w http.ResponseWriter, r *http.Request, req Request) {
	f.mu.Lock()
	rep, failed := f.scriptedFailure(req)
	delay := f.v2.delay
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if failed && rep.status == hangStatus {
		<-r.Context().Done()
		return
	}
	if failed {
		f.write(w, rep)
		return
	}
	stripeContext := r.Header.Get("Stripe-Context")
	f.mu.Lock()
	defer f.mu.Unlock()
	switch id, ok := strings.CutPrefix(r.URL.Path, "/v2/core/events/"); {
	case r.Method != http.MethodGet:
		stripeError(w, http.StatusNotFound, "invalid_request_error", "", "Unrecognized request URL")
	case ok:
		ev, found := f.v2.byID[id]
		if !found || ev.context != stripeContext {
			stripeError(w, http.StatusNotFound, "invalid_request_error", "resource_missing", "No such event: '"+id+"'")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(ev.raw)
	case r.URL.Path == "/v2/core/events":
		f.listV2(w, r, stripeContext)
	default:
		stripeError(w, http.StatusNotFound, "invalid_request_error", "", "Unrecognized request URL")
	}
}

// listV2 is GET /v2/core/events: the context's events, newest first,
// created[gte] and created[lt] (RFC 3339), limit (default 20, max 100),
// and page (the next page's token); Stripe's list shape with
// next_page_url. f.mu is held.
func (f *Stripe) listV2(w http.ResponseWriter, r *http.Request, stripeContext string) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			stripeError(w, http.StatusBadRequest, "invalid_request_error", "", "limit must be between 1 and 100")
			return
		}
		limit = n
	}
	var gte, lt time.Time
	for name, dst := range map[string]*time.Time{"created[gte]": &gte, "created[lt]": &lt} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				stripeError(w, http.StatusBadRequest, "invalid_request_error", "", name+" must be an RFC 3339 timestamp")
				return
			}
			*dst = t
		}
	}
	var ids []string
	for _, id := range f.v2.order {
		ev := f.v2.byID[id]
		if ev.context != stripeContext || (!gte.IsZero() && ev.created.Before(gte)) || (!lt.IsZero() && !ev.created.Before(lt)) {
			continue
		}
		ids = append(ids, id)
	}
	sort.SliceStable(ids, func(i, j int) bool { return f.v2.byID[ids[i]].created.After(f.v2.byID[ids[j]].created) })
	start := 0
	if p := q.Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > len(ids) {
			stripeError(w, http.StatusBadRequest, "invalid_request_error", "", "invalid page")
			return
		}
		start = n
	}
	end := min(start+limit, len(ids))
	data := make([]json.RawMessage, 0, end-start)
	for _, id := range ids[start:end] {
		data = append(data, f.v2.byID[id].raw)
	}
	out := map[string]any{"data": data, "next_page_url": nil, "previous_page_url": nil}
	if end < len(ids) {
		next := r.URL.Query()
		next.Set("page", strconv.Itoa(end))
		out["next_page_url"] = "/v2/core/events?" + next.Encode()
	}
	writeJSON(w, out)
}
