package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// Test clocks (docs/design.md §4), after Stripe's own: a clock is a frozen
// time that its subscriptions take as "now" for every decision, and that
// only moves when advanced. The clocks themselves (create, advance, delete)
// are package testclock's; the billing core only knows that a subscription
// may live on one: it then acts on it through a copy of the service whose
// now is the clock's (forSub, OnClock), with the very code of real time.
//
// Isolation: a clock's subscriptions and periods carry its id, which puts
// their index entries in partitions of their own ("<clock>#<date>#0"); the
// real-time jobs never read those, and a clock's service reads only its
// clock's. Each clock has its own sweep watermark.

// forSub is the service to act on sub with: s itself for a subscription on
// real time (or on the clock s already runs), else a copy whose now is the
// test clock's. A deleted clock's subscriptions (cancelled with it) are
// acted on in real time: a late webhook about one still applies.
func (s *Service) forSub(ctx context.Context, sub Subscription) (*Service, error) {
	if sub.TestClock == s.clock {
		return s, nil
	}
	if sub.TestClock == "" {
		return s.OnClock("", s.wall), nil
	}
	c, err := s.store.GetClock(ctx, sub.TestClock)
	if errors.Is(err, apperr.ErrNotFound) {
		return s.OnClock("", s.wall), nil
	}
	if err != nil {
		return nil, fmt.Errorf("test clock of %s: %w", sub.SubscriptionID, err)
	}
	at := c.ReachedTime
	return s.OnClock(c.ID, func() time.Time { return at }), nil
}

// OnClock is a copy of s on test clock clock ("": real time), whose time is
// now: its jobs read only that clock's index partitions (package testclock
// runs an advance's days through it).
func (s *Service) OnClock(clock string, now func() time.Time) *Service {
	cs := *s
	cs.clock, cs.now = clock, now
	if clock != "" {
		cs.cfg.LockedRetryWait = 0 // an advance retries a locked account sooner itself
	}
	return &cs
}
