package localstripe_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/localstripe"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// A thin destination's types arrive as thin events, signed, in Stripe's
// v2.core.event shape; /v2/core/events/{id} answers each (with
// Stripe-Context for a connected account's), naming its snapshot event,
// which /v1/events/{id} answers on that account. Other types stay
// snapshot events; with SnapshotToo both kinds arrive.
func TestThinEvents(t *testing.T) {
	tests := []struct {
		name        string
		thin        []string
		snapshotToo bool
		wantThin    []string // thin types delivered
		wantSnap    []string // snapshot types delivered
	}{
		{name: "one type thin", thin: []string{"v1.payment_intent.succeeded"},
			wantThin: []string{"v1.payment_intent.succeeded"}, wantSnap: []string{"payment_intent.created"}},
		{name: "every v1 type thin", thin: []string{"v1.*"},
			wantThin: []string{"v1.payment_intent.created", "v1.payment_intent.succeeded"}},
		{name: "both destinations while migrating", thin: []string{"v1.*"}, snapshotToo: true,
			wantThin: []string{"v1.payment_intent.created", "v1.payment_intent.succeeded"},
			wantSnap: []string{"payment_intent.created", "payment_intent.succeeded"}},
		{name: "no thin destination", wantSnap: []string{"payment_intent.created", "payment_intent.succeeded"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rcv, url := newReceiver(t, nil)
			s, c := start(t, localstripe.Config{WebhookURL: url, ThinTypes: tc.thin, SnapshotToo: tc.snapshotToo})
			status, _, pi := c.call(http.MethodPost, "/v1/payment_intents", charge("pm_card_visa"), "Stripe-Account", "acct_1")
			require.Equal(t, http.StatusOK, status, "%v", pi)
			want := len(tc.wantThin) + len(tc.wantSnap)
			require.Eventually(t, func() bool { types, _, _ := rcv.seen(); return len(types) == want },
				5*time.Second, 10*time.Millisecond)
			time.Sleep(50 * time.Millisecond) // nothing more arrives
			types, _, bad := rcv.seen()
			assert.Empty(t, bad, "every delivery is signed")
			var gotThin, gotSnap []string
			for _, typ := range types {
				if len(typ) > 3 && typ[:3] == "v1." {
					gotThin = append(gotThin, typ)
				} else {
					gotSnap = append(gotSnap, typ)
				}
			}
			assert.ElementsMatch(t, tc.wantThin, gotThin)
			assert.ElementsMatch(t, tc.wantSnap, gotSnap)

			for _, d := range s.Deliveries() {
				if d.Kind != "thin" {
					if d.Thin != "" && !tc.snapshotToo {
						assert.Equal(t, "thin_only", d.Status, "%s is sent only as %s", d.EventID, d.Thin)
					}
					continue
				}
				assert.Equal(t, "delivered", d.Status)
				// The thin event as the service parses it, then hydrates it.
				status, _, ev := c.call(http.MethodGet, "/v2/core/events/"+d.EventID, nil, "Stripe-Context", "acct_1")
				require.Equal(t, http.StatusOK, status, "%v", ev)
				raw, _ := json.Marshal(ev)
				parsed, err := stripeevent.ParseThin(raw)
				require.NoError(t, err, "%s", raw)
				assert.Equal(t, d.Type, parsed.Type)
				assert.Equal(t, "acct_1", ev["context"])
				assert.Equal(t, map[string]any{"id": pi["id"], "type": "payment_intent", "url": "/v1/payment_intents/" + pi["id"].(string)}, ev["related_object"])
				assert.Equal(t, d.Snapshot, ev["snapshot_event"])
				status, _, _ = c.call(http.MethodGet, "/v2/core/events/"+d.EventID, nil)
				assert.Equal(t, http.StatusNotFound, status, "a connected account's thin event needs its Stripe-Context")
				status, _, snap := c.call(http.MethodGet, "/v1/events/"+d.Snapshot, nil, "Stripe-Account", "acct_1")
				require.Equal(t, http.StatusOK, status)
				assert.Equal(t, d.Type[len("v1."):], snap["type"])
			}
			// Listed by /v2/core/events too (the service's thin sweep), and
			// a snapshot event sent only as a thin one counts as delivered.
			_, _, list := c.call(http.MethodGet, "/v2/core/events", nil, "Stripe-Context", "acct_1")
			assert.Len(t, list["data"], len(tc.wantThin))
			_, _, failed := c.call(http.MethodGet, "/v1/events?delivery_success=false", nil, "Stripe-Account", "acct_1")
			assert.Empty(t, failed["data"])
		})
	}
}

func TestNormalizeThinTypes(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
		bad  string
	}{
		{in: []string{"v1.payment_intent.succeeded", " invoice.paid ", ""}, want: []string{"v1.payment_intent.succeeded", "v1.invoice.paid"}},
		{in: []string{"*"}, want: []string{"v1.*"}},
		{in: []string{"v2.core.account.updated"}, bad: "v2.core.account.updated"},
		{in: []string{"payments"}, bad: "payments"},
	}
	for _, tc := range tests {
		got, bad := localstripe.NormalizeThinTypes(tc.in)
		assert.Equal(t, tc.bad, bad, "%v", tc.in)
		if tc.bad == "" {
			assert.Equal(t, tc.want, got)
		}
	}
}
