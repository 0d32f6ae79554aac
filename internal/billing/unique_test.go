package billing_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
)

// createAtOnce sends the creates of ins for one account at the same moment
// (released together), each retried while it answers ErrConflict (the API's
// 409 "retry shortly"), and returns each one's result.
func createAtOnce(e *billingtest.Env, account string, ins []billing.CreateInput) ([]billing.Subscription, []error) {
	subs, errs := make([]billing.Subscription, len(ins)), make([]error, len(ins))
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i, in := range ins {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			for attempt := range 20 {
				subs[i], errs[i] = e.Service.CreateSubscription(ctx, account, in)
				if !errors.Is(errs[i], billing.ErrConflict) {
					return
				}
				// As a client retries a 409 "retry shortly": not in a tight
				// loop, which under load could spend every try before the
				// winner's transaction is readable.
				time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond)
			}
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return subs, errs
}

// A subscription id is one subscription of its account, whatever the SKU
// (docs/design.md §8 keys its periods PER#<subscription>#<date>): of concurrent
// creates of one id with different SKUs exactly one is created; every
// other one is refused (ErrDuplicate, 409) and writes nothing, so the
// periods of the id are the winner's alone.
func TestConcurrentCreatesOfOneIDMakeOneSubscription(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	const racers, rounds = 6, 8
	for r := range rounds {
		account, id := fmt.Sprintf("acc-race-%d", r), fmt.Sprintf("sub-race-%d", r)
		var ins []billing.CreateInput
		for i := range racers {
			in := billingtest.Input(fmt.Sprintf("sku-%d", i), 5+i) // different SKUs and days: different first periods
			in.SubscriptionID = id
			ins = append(ins, in)
		}
		subs, errs := createAtOnce(e, account, ins)
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "round %d: creates %d and %d of one id both succeeded", r, winner, i)
				winner = i
				continue
			}
			require.ErrorIs(t, err, billing.ErrDuplicate, "round %d, create %d", r, i)
		}
		require.NotEqual(t, -1, winner, "round %d: no create succeeded", r)
		got, periods := stored(t, e, account, id)
		require.Len(t, got, 1, "round %d: one subscription for the id", r)
		assert.Equal(t, ins[winner].SKU, got[0].SKU)
		assert.Equal(t, subs[winner].NextPaymentDate, got[0].NextPaymentDate)
		require.Len(t, periods, 1, "round %d: only the winner's first period", r)
		assert.Equal(t, subs[winner].NextPeriodDate, periods[0].BillingDate)
		assert.Equal(t, ins[winner].SKU, periods[0].SKU)
	}
}

// The same create sent several times at once (a client's retries racing
// each other) is one subscription, and every one of them answers it.
func TestConcurrentRetriesOfOneCreateAnswerTheSameSubscription(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	in := billingtest.Input("gold", 15)
	in.SubscriptionID = "sub-retried"
	ins := []billing.CreateInput{in, in, in, in, in}
	subs, errs := createAtOnce(e, "acc-retried", ins)
	for i, err := range errs {
		require.NoError(t, err, "create %d", i)
		assert.Equal(t, subs[0].SubscriptionID, subs[i].SubscriptionID)
		assert.Equal(t, subs[0].NextPaymentDate, subs[i].NextPaymentDate)
	}
	got, periods := stored(t, e, "acc-retried", "sub-retried")
	assert.Len(t, got, 1)
	assert.Len(t, periods, 1)
}

// An id taken by a subscription of one SKU is refused for another SKU
// later too (the sequential case), and a cancelled subscription keeps its
// id.
func TestSubscriptionIDIsTakenForGood(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	in := billingtest.Input("gold", 15)
	in.SubscriptionID = "sub-once"
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", in)
	require.NoError(t, err)
	other := in
	other.SKU = "silver"
	_, err = e.Service.CreateSubscription(ctx, "acc-1", other)
	require.ErrorIs(t, err, billing.ErrDuplicate)
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "cancel"})
	require.NoError(t, err)
	_, err = e.Service.CreateSubscription(ctx, "acc-1", other)
	require.ErrorIs(t, err, billing.ErrDuplicate)
	// Another account may use the id.
	_, err = e.Service.CreateSubscription(ctx, "acc-2", other)
	require.NoError(t, err)
}
