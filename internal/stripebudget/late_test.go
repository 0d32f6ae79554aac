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
//     requests go, so nearly the whole rate is sent, and the releases
//     still hold to the rate plus the tolerance's requests (plus the
//     window's edge) in any one-second window;
//   - the control, one request's worth (the budget's first default),
//     drops every stalled slot and sends about a fifth less.
//
// The machine's own late wake-ups drop slots in both (a 2-core machine
// shared by many suites), so the two are compared with each other.
func TestLateToleranceSpendsStalledSlots(t *testing.T) {
	t.Parallel()
	const rate, seconds = 50.0, 4
	oneRequest := time.Duration(float64(time.Second) / rate)
	dbURL := testenv.DatabaseURL(t)
	type result struct{ sent, used, dropped int64 }
	results := map[string]result{}
	for _, tc := range []struct {
		name  string
		late  time.Duration // Config.Late (0: the default)
		slack int           // requests above the rate in a one-second window of releases
	}{
		{"default tolerance", 0, 1 + stripebudget.DefaultLateRequests},
		{"control: one request's worth", oneRequest, windowSlack},
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
			res := result{sent: int64(len(fake.times(""))), used: after.Used - before.Used, dropped: after.Late - before.Late}
			results[tc.name] = res
			t.Logf("%d requests in %d s (%.2f of the rate), %d slots used and %d dropped as late",
				res.sent, seconds, float64(res.sent)/(rate*seconds), res.used, res.dropped)
			assertRateAtStripe(t, fake, rate, tc.slack)
		})
	}
	tolerant, control := results["default tolerance"], results["control: one request's worth"]
	assert.GreaterOrEqual(t, float64(tolerant.sent), 0.85*rate*seconds, "the stalled requests' slots were lost")
	assert.Less(t, tolerant.dropped*2, control.dropped, "slots within the tolerance were dropped")
	assert.Greater(t, tolerant.sent, control.sent, "the tolerance kept no slot the control lost")
	assert.GreaterOrEqual(t, float64(control.dropped), 0.15*float64(control.used), "the control should drop the stalled slots (else the test proves nothing)")
}
