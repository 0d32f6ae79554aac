package billingtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// The crash steps are found in the changes the service commits: a claim is
// "claimed", the record of an attempt's outcome "committed", and nothing
// else that shares their causes (a stale mark, a lost attempt, a webhook).
func TestCrasherFindsTheStepsOfAnAttempt(t *testing.T) {
	now := time.Date(2024, 1, 10, 10, 0, 0, 0, time.UTC)
	base := billing.Period{AccountID: "acc-1", SubscriptionID: "sub-1", BillingDate: dates.MustParse("2024-01-10"), Attempts: 1}
	sub := billing.Subscription{AccountID: "acc-1", SubscriptionID: "sub-1", Version: 3}
	tx := func(cause string, quiet bool, edit func(p *billing.Period)) *billing.Tx {
		p := base
		edit(&p)
		x := billing.NewTx(cause, now)
		if cause == "claim" {
			x.CheckSubscription(sub)
		}
		x.PutPeriod(&p, quiet)
		return x
	}
	claim := tx("claim", true, func(p *billing.Period) { p.InFlightKey = "billing:acc-1:sub-1:2024-01-10:2" })
	recorded := tx("collect:2024-01-10:attempt-2", false, func(p *billing.Period) { p.Attempts, p.UpdatedEvent = 2, "completed" })
	resolved := tx("resolve:2024-01-11:attempt-2", false, func(p *billing.Period) { p.Attempts, p.UpdatedEvent = 2, "attempt-failed" })
	stale := tx("collect:2024-02-10:attempt-2", false, func(p *billing.Period) { p.UpdatedEvent = "stale" })
	lost := tx("resolve:2024-01-11:attempt-2", false, func(p *billing.Period) { p.Attempts, p.UpdatedEvent = 2, "attempt-lost" })
	webhook := tx("evt:evt_1", false, func(p *billing.Period) { p.Attempts, p.UpdatedEvent = 2, "completed" })

	_, ok := claimOf(claim)
	assert.True(t, ok, "claim")
	for name, x := range map[string]*billing.Tx{"recorded": recorded, "resolved": resolved} {
		p, ok := recordOf(x)
		assert.True(t, ok, name)
		assert.Equal(t, 2, p.Attempts, name)
		_, ok = claimOf(x)
		assert.False(t, ok, name)
	}
	for name, x := range map[string]*billing.Tx{"claim": claim, "stale": stale, "lost": lost, "webhook": webhook} {
		_, ok := recordOf(x)
		assert.False(t, ok, "%s is not the record of an attempt", name)
	}
}
