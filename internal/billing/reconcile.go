package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// SettleFromStripe settles a billing attempt from the event Stripe would
// have sent about its PaymentIntent (the reconciliation's snapshot,
// docs/design.md §11), exactly as the webhook feed does: the same trust
// checks, the account's lock, the conditional transitions, a history entry
// keyed by the event's id (so the same snapshot settles once). It waits
// for a held lock (a collection run) up to wait. applies is false when the
// event is not about a billing charge.
func (s *Service) SettleFromStripe(ctx context.Context, ev *stripe.Event, wait time.Duration) (applies bool, err error) {
	msg, ok, err := FeedFromEvent(ev)
	if err != nil || !ok {
		return false, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := s.ApplyFeed(ctx, msg)
		if !errors.Is(err, ErrLocked) || time.Now().After(deadline) {
			if err != nil {
				return true, fmt.Errorf("settle %s from Stripe: %w", msg.PaymentIntent, err)
			}
			return true, nil
		}
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
