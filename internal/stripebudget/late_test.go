package stripebudget_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// TestLateToleranceSpendsStalledSlots: every fifth request wakes one and a
// half requests' worth after its slot (a stalled process). A slot nobody
// uses in time is lost for good, so the tolerance decides what a stall
// costs:
//
//   - with the default tolerance (three requests' worth) the stalled
//     requests go, no slot is dropped and nearly the whole rate is sent,
//     and the releases still hold to the rate plus the tolerance's requests
//     (plus the window's edge) in any one-second window;
//   - the control, one request's worth (the budget's first default),
//     drops every stalled slot and sends a fifth less.
func TestLateToleranceSpendsStalledSlots(t *testing.T) {
	t.Parallel()
	const rate, seconds = 50.0, 4
	oneRequest := time.Duration(float64(time.Second) / rate)
	dbURL := testenv.DatabaseURL(t)
	for _, tc := range []struct {
		name string
		late time.Duration // Config.Late (0: the default)
	}{
		{"default tolerance", 0},
		{"control: one request's worth", oneRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReplica(t, dbURL, "late-"+tc.name, stripebudget.Config{Rate: rate, Late: tc.late, Log: quietLog()})
			r.budget.StallWakeUps(func(n int) time.Duration {
				if n%5 == 4 {
					return oneRequest * 3 / 2
				}
				return 0
			})
			fake := newFakeStripe(t)
			ctx, cancel := context.WithTimeout(context.Background(), warmUp+seconds*time.Second)
			defer cancel()
			r.send(ctx, t, fake.URL, stripebudget.Charges, 8)
			fake.warmedUp()
			before := r.budget.Stats()
			<-ctx.Done()
			after := r.budget.Stats()
			used, dropped := after.Used-before.Used, after.Late-before.Late
			sent := len(fake.times(""))
			t.Logf("%d requests in %d s (%.2f of the rate), %d slots used and %d dropped as late", sent, seconds, float64(sent)/(rate*seconds), used, dropped)

			if tc.late == 0 {
				assertRateAtStripe(t, fake, rate, 1+stripebudget.DefaultLateRequests)
				assert.GreaterOrEqual(t, float64(sent), 0.9*rate*seconds, "the stalled requests' slots were lost")
				assert.LessOrEqual(t, float64(dropped), 0.05*float64(used), "slots within the tolerance were dropped")
				return
			}
			assertRateAtStripe(t, fake, rate, windowSlack)
			assert.GreaterOrEqual(t, float64(dropped), 0.1*float64(used), "the control should drop the stalled slots (else the test proves nothing)")
			assert.Less(t, float64(sent), 0.9*rate*seconds, "the control should lose the dropped slots' share (else the test proves nothing)")
		})
	}
}
