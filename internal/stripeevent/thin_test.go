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
			ro := doc["related_object"].(map[string]any)
			assert.Equal(t, ro["id"], th.RelatedObject.ID)
			assert.Equal(t, ro["url"], th.RelatedObject.URL)
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
