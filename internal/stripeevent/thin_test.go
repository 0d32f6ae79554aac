package stripeevent_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

func TestParseThinTakesEveryFixture(t *testing.T) {
	names := stripetest.ThinFixtureNames()
	require.GreaterOrEqual(t, len(names), 7)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			raw := stripetest.ThinFixture(t, name)
			th, err := stripeevent.ParseThin(raw)
			require.NoError(t, err)
			var doc map[string]any
			require.NoError(t, json.Unmarshal(raw, &doc))
			assert.Equal(t, doc["id"], th.ID)
			assert.Equal(t, name, th.Type)
			created, err := time.Parse(time.RFC3339Nano, doc["created"].(string))
			require.NoError(t, err)
			assert.True(t, created.Equal(th.Created))
			if c, ok := doc["context"].(string); ok {
				assert.Equal(t, c, th.Context)
			} else {
				assert.Empty(t, th.Context)
			}
			if ro, ok := doc["related_object"].(map[string]any); ok {
				assert.Equal(t, ro["id"], th.RelatedObject.ID)
				assert.Equal(t, ro["url"], th.RelatedObject.URL)
			} else { // a health event names its object in its data only
				assert.Zero(t, th.RelatedObject)
			}
			assert.Equal(t, strings.HasPrefix(name, "v1."), th.V1())
			// A thin body is never a snapshot event.
			_, err = stripeevent.Parse(raw)
			assert.ErrorIs(t, err, stripeevent.ErrMalformed)
			assert.Equal(t, stripeevent.ObjectThin, stripeevent.ObjectOf(raw))
		})
	}
}

func TestThinSnapshotType(t *testing.T) {
	for typ, want := range map[string]string{
		"v1.payment_intent.succeeded":      "payment_intent.succeeded",
		"v1.customer.subscription.updated": "customer.subscription.updated",
		"v2.core.account.updated":          "",
	} {
		assert.Equal(t, want, stripeevent.Thin{Type: typ}.SnapshotType(), typ)
	}
}

func TestParseThinRefusesBadInput(t *testing.T) {
	base := func() map[string]any {
		var doc map[string]any
		if err := json.Unmarshal(stripetest.ThinFixture(t, "v1.payment_intent.succeeded"), &doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	cases := []struct {
		name   string
		change func(map[string]any)
		want   string
	}{
		{"snapshot object", func(d map[string]any) { d["object"] = "event" }, "object"},
		{"other object", func(d map[string]any) { d["object"] = "v2.core.account" }, "object"},
		{"missing id", func(d map[string]any) { delete(d, "id") }, "id"},
		{"id not an event", func(d map[string]any) { d["id"] = "pi_123" }, "id"},
		{"id with a slash", func(d map[string]any) { d["id"] = "evt_1/../x" }, "id"},
		{"missing type", func(d map[string]any) { delete(d, "type") }, "type"},
		{"empty type", func(d map[string]any) { d["type"] = "" }, "type"},
		{"type with spaces", func(d map[string]any) { d["type"] = "v1 payment" }, "type"},
		{"created as unix seconds", func(d map[string]any) { d["created"] = 1764082990 }, "created"},
		{"created as a date", func(d map[string]any) { d["created"] = "2026-11-25" }, "created"},
		{"created without zone", func(d map[string]any) { d["created"] = "2026-11-25T15:03:10.123" }, "created"},
		{"created missing", func(d map[string]any) { delete(d, "created") }, "created"},
		{"created out of range", func(d map[string]any) { d["created"] = "0001-01-01T00:00:00Z" }, "created"},
		{"context not an account", func(d map[string]any) { d["context"] = "cus_123" }, "context"},
		{"context with a slash", func(d map[string]any) { d["context"] = "acct_1/x" }, "context"},
		{"context a number", func(d map[string]any) { d["context"] = 12 }, ""},
		{"related object id bad", func(d map[string]any) { d["related_object"] = map[string]any{"id": "pi 1", "type": "payment_intent"} }, "related_object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := base()
			tc.change(doc)
			raw, err := json.Marshal(doc)
			require.NoError(t, err)
			_, err = stripeevent.ParseThin(raw)
			require.ErrorIs(t, err, stripeevent.ErrMalformed)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := stripeevent.ParseThin([]byte(`not json`))
	assert.ErrorIs(t, err, stripeevent.ErrMalformed)
}

// TestDisagreements: every field a notification can claim, differing from
// Stripe's copy, is named with both values; an identical one has none.
func TestDisagreements(t *testing.T) {
	stripes, err := stripeevent.ParseThin(stripetest.Thin{Fixture: "v1.payment_intent.succeeded"}.Build(t))
	require.NoError(t, err)
	assert.Empty(t, stripeevent.Disagreements(stripes, stripes))
	for _, c := range []struct {
		field string
		forge func(*stripeevent.Thin)
	}{
		{"type", func(n *stripeevent.Thin) { n.Type = "v2.core.health.event_generation_failure.resolved" }},
		{"created", func(n *stripeevent.Thin) { n.Created = n.Created.AddDate(73, 0, 0) }},
		{"context", func(n *stripeevent.Thin) { n.Context = "" }},
		{"livemode", func(n *stripeevent.Thin) { n.Livemode = !n.Livemode }},
		{"related_object", func(n *stripeevent.Thin) { n.RelatedObject.ID = "pi_3OtherLkdIwHu7ix28a3tqPa" }},
		{"related_object", func(n *stripeevent.Thin) { n.RelatedObject = stripeevent.RelatedObject{} }},
	} {
		n := stripes
		c.forge(&n)
		diff := stripeevent.Disagreements(n, stripes)
		require.Len(t, diff, 1, c.field)
		assert.True(t, strings.HasPrefix(diff[0], c.field+" "), diff[0])
		assert.Contains(t, diff[0], "Stripe's copy")
	}
}

// TestParseHealthResolved reads the health event's data where Stripe's
// SDKs put it (data.impact.{context, event_type, related_object},
// data.severity) and refuses data that names no usable object.
func TestParseHealthResolved(t *testing.T) {
	const pi = "pi_3MtwBwLkdIwHu7ix28a3tqPa"
	raw := func(d map[string]any) json.RawMessage {
		b, err := json.Marshal(d)
		require.NoError(t, err)
		return b
	}
	h, err := stripeevent.ParseHealthResolved(raw(stripetest.HealthResolved{Context: "acct_1Nv0FGQ9RKHgCVdK", ObjectID: pi,
		Severity: "critical"}.Data()))
	require.NoError(t, err)
	assert.Equal(t, stripeevent.HealthResolved{Context: "acct_1Nv0FGQ9RKHgCVdK", EventType: "payment_intent.succeeded",
		RelatedObject: stripeevent.RelatedObject{ID: pi, Type: "payment_intent", URL: "/v1/payment_intents/" + pi},
		Severity:      stripeevent.SeverityCritical}, h)

	for sent, want := range map[string]string{"non_critical": stripeevent.SeverityNonCritical, "": stripeevent.SeverityUnknown,
		"catastrophic": stripeevent.SeverityUnknown} {
		h, err := stripeevent.ParseHealthResolved(raw(stripetest.HealthResolved{ObjectID: pi, Severity: sent}.Data()))
		require.NoError(t, err, sent)
		assert.Equal(t, want, h.Severity, sent)
		assert.Empty(t, h.Context, "the platform")
	}

	for name, data := range map[string]map[string]any{
		"no impact":          {"severity": "critical"},
		"no related object":  {"impact": map[string]any{"event_type": "payment_intent.succeeded"}},
		"top-level object":   {"related_object": map[string]any{"id": pi, "type": "payment_intent", "url": "/v1/payment_intents/" + pi}},
		"bad object id":      {"impact": map[string]any{"related_object": map[string]any{"id": "nope", "url": "/v1/x/nope"}}},
		"no url":             {"impact": map[string]any{"related_object": map[string]any{"id": pi, "type": "payment_intent"}}},
		"context no account": {"impact": map[string]any{"context": "cus_123", "related_object": map[string]any{"id": pi, "url": "/v1/payment_intents/" + pi}}},
	} {
		_, err := stripeevent.ParseHealthResolved(raw(data))
		assert.ErrorIs(t, err, stripeevent.ErrMalformed, name)
	}
}
