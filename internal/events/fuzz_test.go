package events_test

import (
	"testing"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// FuzzParse: arbitrary bodies never panic the decoder, and whatever it
// accepts makes a well-formed record.
func FuzzParse(f *testing.F) {
	for _, name := range stripetest.FixtureNames() {
		f.Add(stripetest.Fixture(f, name))
	}
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"subscription":{"id":7}}}}`))
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":null}}`))
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"x","created":-5,"data":{"object":{}}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		ev, err := events.Parse(payload)
		if err != nil {
			return
		}
		rec := events.NewRecord(ev, payload, "acct_platform", time.Hour, events.SourceWebhook, time.Now())
		if rec.ID == "" || rec.Type == "" || rec.StripeAccount == "" || rec.Created.IsZero() {
			t.Fatalf("accepted event makes an incomplete record: %+v", rec)
		}
		if len(rec.Date()) != 10 || len(rec.Time()) != 12 {
			t.Fatalf("bad date/time rendering %q %q", rec.Date(), rec.Time())
		}
		if _, err := events.Compress(payload); err != nil {
			t.Fatal(err)
		}
	})
}
