package billing_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// race runs the day's collection while an operator's batch collection and a
// pay now charge the ERROR periods of one account (docs/design.md §8 "Batch
// collection": exactly as pay now, the same claim and idempotency key
// rules). check() then holds every period to one successful charge.
func (s *sim) race(ctx context.Context, day dates.Date) {
	// An account with an ERROR period, when one is found soon: the race is
	// about charging it.
	acct, payOn := s.subs[0].AccountID, s.subs[0].SubscriptionID
	for i, at := 0, s.intn(len(s.subs)); i < min(60, len(s.subs)); i++ {
		sub := s.subs[(at+i)%len(s.subs)]
		acct, payOn = sub.AccountID, sub.SubscriptionID
		periods, err := s.e.Store.ListPeriods(ctx, sub.AccountID, sub.SubscriptionID)
		if err != nil {
			s.violate("race: periods of %s: %v", sub.SubscriptionID, err)
			return
		}
		if slices.ContainsFunc(periods, func(p billing.Period) bool { return p.Status == billing.Error }) {
			break
		}
	}
	if s.chance(0.5) {
		// Half the time the pay now is on another subscription of the
		// account, so the batch gets to charge the ERROR one first too.
		var others []string
		for _, sub := range s.subs {
			if sub.AccountID == acct && sub.SubscriptionID != payOn {
				others = append(others, sub.SubscriptionID)
			}
		}
		if len(others) > 0 {
			payOn = others[s.intn(len(others))]
		}
	}
	s.stat("race", 1)
	s.racing.Store(true)
	defer s.racing.Store(false)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		_, _ = s.e.Service.Collect(ctx, day) // its rerun loop follows in collect
	}()
	go func() {
		defer wg.Done()
		s.batch(ctx, acct)
	}()
	go func() {
		defer wg.Done()
		_, _, err := s.e.Service.Pay(ctx, acct, payOn)
		s.stat("race:paynow:"+raceOutcome(err), 1)
	}()
	wg.Wait()
}

// batch selects one account's subscriptions and charges each as the batch
// runner does (a locked account is tried again a few times).
func (s *sim) batch(ctx context.Context, acct string) {
	cands, err := s.e.Service.SelectBatch(ctx, billing.BatchSelection{AccountIDs: []string{acct}})
	if err != nil {
		s.violate("batch selection of %s: %v", acct, err)
		return
	}
	for _, c := range cands {
		if c.Skip != "" {
			s.stat("race:batch:selected-"+c.Skip, 1)
			continue
		}
		for try := 0; ; try++ {
			res, err := s.e.Service.BatchCharge(ctx, c.AccountID, c.SubscriptionID, c.BillingDate, nil, func(billing.BatchAttempt) error { return nil })
			busy := errors.Is(err, billing.ErrLocked) || errors.Is(err, billing.ErrConflict)
			if busy && try < 5 {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if err == nil {
				s.stat("race:batch:"+res.Outcome, 1)
				if res.Outcome == billing.BatchPaid || res.Outcome == billing.BatchDeclined || res.Outcome == billing.BatchProcessing {
					s.stat("race:batch:charged", 1)
				}
			} else {
				s.stat("race:batch:"+raceOutcome(err), 1)
			}
			break
		}
	}
}

func raceOutcome(err error) string {
	switch {
	case err == nil:
		return "charged"
	case errors.Is(err, billing.ErrNothingToPay):
		return "nothing"
	case errors.Is(err, billing.ErrAttemptInFlight):
		return "in-flight"
	case errors.Is(err, billing.ErrLocked), errors.Is(err, billing.ErrConflict):
		return "busy"
	case errors.Is(err, apperr.ErrInvalid):
		return "refused"
	}
	return "unknown" // an answer Stripe did not give: the collection resolves it
}
