package events_test

import (
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// FuzzParse: arbitrary bodies never panic the decoder, and whatever it
// accepts makes a well-formed record that DynamoDB and Postgres can store:
// keys within DynamoDB's limits, no NUL bytes (Postgres text refuses them),
// a creation time inside timestamptz's range. A signed event that decodes
// but cannot be stored would fail forever.
func FuzzParse(f *testing.F) {
	for _, name := range stripetest.FixtureNames() {
		f.Add(stripetest.Fixture(f, name))
	}
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"subscription":{"id":7}}}}`))
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":null}}`))
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"x","created":-5,"data":{"object":{}}}`))
	f.Add([]byte(`{"id":"evt_\u0000","object":"event","type":"x","created":1,"data":{"object":{}}}`))
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"x\u0000","created":1,"data":{"object":{}}}`))
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"x","account":"acct_\u0000","created":1,"data":{"object":{}}}`))
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"x","created":99999999999999,"data":{"object":{}}}`))
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"object":"subscription","id":"sub_a/b"}}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		ev, err := stripeevent.Parse(payload)
		if err != nil {
			return
		}
		rec := events.NewRecord(ev, payload, "acct_platform", time.Hour, stripeevent.SourceWebhook, time.Now())
		if rec.ID == "" || rec.Type == "" || rec.StripeAccount == "" || rec.Created.IsZero() {
			t.Fatalf("accepted event makes an incomplete record: %+v", rec)
		}
		for name, v := range map[string]string{"id": rec.ID, "type": rec.Type, "stripe_account": rec.StripeAccount, "subscription": rec.Subscription} {
			if len(v) > 255 || !utf8.ValidString(v) {
				t.Fatalf("%s %q is not a storable key", name, v)
			}
			for _, c := range []byte(v) {
				if c < 0x21 || c > 0x7e {
					t.Fatalf("%s %q holds byte %#x", name, v, c)
				}
			}
		}
		if rec.Subscription != "" && !stripeid.Valid(rec.Subscription, "sub_") {
			t.Fatalf("subscription %q is not a subscription id", rec.Subscription)
		}
		if y := rec.Created.Year(); y < 1970 || y > 9999 {
			t.Fatalf("created year %d does not fit the stores", y)
		}
		if len(rec.Date()) != 10 || len(rec.Time()) != 12 {
			t.Fatalf("bad date/time rendering %q %q", rec.Date(), rec.Time())
		}
		if _, err := events.Compress(payload); err != nil {
			t.Fatal(err)
		}
	})
}
