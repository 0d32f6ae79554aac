package stripeevent

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// PayloadKind is how Stripe delivered an event (docs/design.md §4): a snapshot
// event (`"object":"event"`, the object's state in data.object) or a thin
// one (`"object":"v2.core.event"`, a reference the service hydrates).
type PayloadKind string

const (
	KindSnapshot PayloadKind = "snapshot"
	KindThin     PayloadKind = "thin"
)

// Object values of the two shapes.
const (
	ObjectSnapshot = "event"
	ObjectThin     = "v2.core.event"
)

// Received is the outcome of a thin notification that is recorded and
// waits for hydration (its record's status is `received`).
const Received Outcome = "received"

// Thin is a thin event notification as Stripe delivers it to an event
// destination: `id`, `type`, `created` (RFC 3339), `livemode`, `context`
// (the connected account, when there is one) and `related_object`.
type Thin struct {
	ID       string
	Type     string
	Created  time.Time
	Livemode bool
	// Context is the connected account the event belongs to ("" for the
	// platform): hydration sends it as Stripe-Context (v2) or
	// Stripe-Account (v1).
	Context       string
	RelatedObject RelatedObject
}

// RelatedObject is the API resource a thin event is about.
type RelatedObject struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	URL  string `json:"url"`
}

// V1 reports whether the event is about an API v1 resource: it names a
// snapshot event that goes through the snapshot handler.
func (t Thin) V1() bool { return strings.HasPrefix(t.Type, "v1.") }

// SnapshotType is the snapshot event type a v1 thin type stands for
// (v1.payment_intent.succeeded -> payment_intent.succeeded); "" for others.
func (t Thin) SnapshotType() string {
	if s, ok := strings.CutPrefix(t.Type, "v1."); ok {
		return s
	}
	return ""
}

// thinTypePattern: v2 types name a part of an object in brackets
// (v2.core.account[configuration.merchant].updated).
var thinTypePattern = regexp.MustCompile(`^[A-Za-z0-9_.\[\]]{1,255}$`)

type thinEnvelope struct {
	ID            string          `json:"id"`
	Object        string          `json:"object"`
	Type          string          `json:"type"`
	Created       json.RawMessage `json:"created"`
	Livemode      bool            `json:"livemode"`
	Context       *string         `json:"context"`
	RelatedObject *RelatedObject  `json:"related_object"`
}

// ParseThin decodes a thin event notification and checks what the record
// and its hydration need; anything else is ErrMalformed (a 400 that records
// nothing).
func ParseThin(payload []byte) (Thin, error) {
	var env thinEnvelope
	if err := json.Unmarshal(payload, &env); err != nil {
		return Thin{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch {
	case env.Object != ObjectThin:
		return Thin{}, fmt.Errorf("%w: object is %q, want %q", ErrMalformed, truncate(env.Object, 64), ObjectThin)
	case !stripeid.Valid(env.ID, "evt_"):
		return Thin{}, fmt.Errorf("%w: id %q is not an event id", ErrMalformed, truncate(env.ID, 64))
	case !thinTypePattern.MatchString(env.Type):
		return Thin{}, fmt.Errorf("%w: missing or invalid type", ErrMalformed)
	}
	created, err := thinCreated(env.Created)
	if err != nil {
		return Thin{}, err
	}
	t := Thin{ID: env.ID, Type: env.Type, Created: created, Livemode: env.Livemode}
	if env.Context != nil && *env.Context != "" {
		if !stripeid.Valid(*env.Context, "acct_") {
			return Thin{}, fmt.Errorf("%w: context %q is not an account id", ErrMalformed, truncate(*env.Context, 64))
		}
		t.Context = *env.Context
	}
	if ro := env.RelatedObject; ro != nil {
		if ro.ID != "" && !validObjectID(ro.ID) {
			return Thin{}, fmt.Errorf("%w: related_object.id %q is not an object id", ErrMalformed, truncate(ro.ID, 64))
		}
		if len(ro.Type) > 255 || len(ro.URL) > 2048 {
			return Thin{}, fmt.Errorf("%w: related_object too long", ErrMalformed)
		}
		t.RelatedObject = *ro
	}
	return t, nil
}

// thinCreated parses `created`, an RFC 3339 timestamp with fractional
// seconds ("2026-11-25T15:03:10.123Z"); a number (the snapshot shape) or
// any other format is refused.
func thinCreated(raw json.RawMessage) (time.Time, error) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return time.Time{}, fmt.Errorf("%w: created must be an RFC 3339 timestamp", ErrMalformed)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: created %q is not an RFC 3339 timestamp", ErrMalformed, truncate(s, 64))
	}
	if t.Unix() <= 0 || t.Unix() > MaxCreated {
		return time.Time{}, fmt.Errorf("%w: created %q is out of range", ErrMalformed, truncate(s, 64))
	}
	return t.UTC(), nil
}

// validObjectID: a Stripe object id of any prefix ("pi_…", "acct_…").
func validObjectID(id string) bool {
	i := strings.IndexByte(id, '_')
	return i > 0 && stripeid.Valid(id, id[:i+1])
}

// ObjectOf reads the `object` of a JSON body without decoding the rest
// (fields are not allocated). "" when it has none or is not JSON.
func ObjectOf(payload []byte) string {
	var head struct {
		Object string `json:"object"`
	}
	if json.Unmarshal(payload, &head) != nil {
		return ""
	}
	return head.Object
}

// ThinCopy is Stripe's own copy of a thin event, as GET /v2/core/events/{id}
// returns it: the notification's fields, and what only the copy has. What
// hydration applies comes from it, never from the notification.
type ThinCopy struct {
	Thin
	// SnapshotEvent is the v1 event a v1 type stands for ("" for a v2 one).
	SnapshotEvent string
	// Data is the event's data (a health event's impact and severity).
	Data json.RawMessage
}

// ParseThinCopy decodes Stripe's copy of a thin event, checked as a
// notification is (ErrMalformed otherwise).
func ParseThinCopy(raw []byte) (ThinCopy, error) {
	t, err := ParseThin(raw)
	if err != nil {
		return ThinCopy{}, err
	}
	var rest struct {
		SnapshotEvent string          `json:"snapshot_event"`
		Data          json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &rest); err != nil {
		return ThinCopy{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return ThinCopy{Thin: t, SnapshotEvent: rest.SnapshotEvent, Data: rest.Data}, nil
}

// Disagreements names every field where notification n says something
// other than Stripe's copy c of the same event: type, created, context,
// livemode, related_object. None means n may be hydrated from c.
func Disagreements(n, c Thin) []string {
	var out []string
	differ := func(field, said, stripes string) {
		if said != stripes {
			out = append(out, fmt.Sprintf("%s %q (Stripe's copy: %q)", field, truncate(said, 64), truncate(stripes, 64)))
		}
	}
	if n.ID != c.ID {
		differ("id", n.ID, c.ID)
	}
	differ("type", n.Type, c.Type)
	if !n.Created.Equal(c.Created) {
		differ("created", n.Created.Format(time.RFC3339Nano), c.Created.Format(time.RFC3339Nano))
	}
	differ("context", n.Context, c.Context)
	if n.Livemode != c.Livemode {
		differ("livemode", fmt.Sprint(n.Livemode), fmt.Sprint(c.Livemode))
	}
	if n.RelatedObject != c.RelatedObject {
		ro := func(r RelatedObject) string {
			if r == (RelatedObject{}) {
				return ""
			}
			return r.Type + " " + r.ID + " " + r.URL
		}
		differ("related_object", ro(n.RelatedObject), ro(c.RelatedObject))
	}
	return out
}

// Severities of a health event (data.severity, since 2026-11-18).
const (
	SeverityCritical    = "critical"
	SeverityNonCritical = "non_critical"
	// SeverityUnknown stands for a severity Stripe did not send (events
	// from before it had one) or one this code does not know.
	SeverityUnknown = "unknown"
)

// HealthResolved is the data of a
// v2.core.health.event_generation_failure.resolved event: Stripe failed to
// generate an event of EventType about RelatedObject on Context (the
// connected account; "" the platform) and has resolved it.
type HealthResolved struct {
	Context       string
	EventType     string
	RelatedObject RelatedObject
	// Severity is SeverityCritical, SeverityNonCritical or SeverityUnknown.
	Severity string
}

// ParseHealthResolved reads a health event's data where Stripe puts it:
// data.impact.{context, event_type, related_object} and data.severity.
func ParseHealthResolved(data json.RawMessage) (HealthResolved, error) {
	var doc struct {
		Severity string `json:"severity"`
		Impact   *struct {
			Context       string         `json:"context"`
			EventType     string         `json:"event_type"`
			RelatedObject *RelatedObject `json:"related_object"`
		} `json:"impact"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return HealthResolved{}, fmt.Errorf("%w: health event data: %v", ErrMalformed, err)
	}
	h := HealthResolved{Severity: SeverityUnknown}
	if doc.Severity == SeverityCritical || doc.Severity == SeverityNonCritical {
		h.Severity = doc.Severity
	}
	im := doc.Impact
	if im == nil || im.RelatedObject == nil {
		return h, fmt.Errorf("%w: health event names no object (data.impact.related_object)", ErrMalformed)
	}
	ro := *im.RelatedObject
	switch {
	case !validObjectID(ro.ID):
		return h, fmt.Errorf("%w: data.impact.related_object.id %q is not an object id", ErrMalformed, truncate(ro.ID, 64))
	case ro.URL == "" || len(ro.URL) > 2048 || len(ro.Type) > 255:
		return h, fmt.Errorf("%w: data.impact.related_object has no usable url", ErrMalformed)
	case im.Context != "" && !stripeid.Valid(im.Context, "acct_"):
		return h, fmt.Errorf("%w: data.impact.context %q is not an account id", ErrMalformed, truncate(im.Context, 64))
	case len(im.EventType) > 255:
		return h, fmt.Errorf("%w: data.impact.event_type too long", ErrMalformed)
	}
	h.Context, h.EventType, h.RelatedObject = im.Context, im.EventType, ro
	return h, nil
}
