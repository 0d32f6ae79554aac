package billing

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// Test clocks (docs/design.md §4), after Stripe's own: a clock is a frozen time that
// its subscriptions take as "now" for every decision, and that only moves
// when advanced. An advance runs, for the clock's subscriptions only, the
// reminder and collection jobs of every day up to the new time, through the
// very code of the real jobs (Remind, Collect: same lock, idempotency keys,
// history, receipts, actions, Stripe calls), on a copy of the service whose
// clock is the test clock's.
//
// Isolation: a clock's subscriptions and periods carry its id, which puts
// their index entries in partitions of their own ("<clock>#<date>#0"); the
// real-time jobs never read those, and an advance reads only its clock's.
// Each clock has its own sweep watermark.

// ClockStatus is a test clock's state (Stripe's names).
type ClockStatus string

const (
	ClockReady     ClockStatus = "ready"
	ClockAdvancing ClockStatus = "advancing"
	// ClockFailed: the last advance stopped on a job that did not finish
	// cleanly (Error says why); advancing again continues from ReachedTime.
	ClockFailed ClockStatus = "internal_failure"
)

// MaxClockAdvanceYears bounds one advance (docs/design.md §4).
const MaxClockAdvanceYears = 3

var (
	// ErrLivemode: test clocks exist in test mode only.
	ErrLivemode = apperr.New(apperr.CodeLivemode, "test clocks are for test mode only: STRIPE_API_KEY is a live key")
	// ErrClockBusy: the clock is being advanced.
	ErrClockBusy = apperr.New(apperr.CodeConflict, "the test clock is advancing; wait until its status is ready")
)

// Clock is a test clock.
type Clock struct {
	ID   string
	Name string
	// FrozenTime is the time the clock is set to: the target while an
	// advance runs.
	FrozenTime time.Time
	// ReachedTime is how far the jobs have run: FrozenTime once ready. A
	// clock's subscriptions take "now" from it.
	ReachedTime time.Time
	Status      ClockStatus
	Error       string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	Version     int64

	// LeaseOwner holds the clock while it advances, until LeaseUntil (a
	// replica that went away loses it then).
	LeaseOwner string
	LeaseUntil time.Time
}

// forSub is the service to act on sub with: s itself for a subscription on
// real time (or on the clock s already runs), else a copy whose now is the
// test clock's. A deleted clock's subscriptions (cancelled with it) are
// acted on in real time: a late webhook about one still applies.
func (s *Service) forSub(ctx context.Context, sub Subscription) (*Service, error) {
	if sub.TestClock == s.clock {
		return s, nil
	}
	if sub.TestClock == "" {
		return s.onClock("", s.wall), nil
	}
	c, err := s.store.GetClock(ctx, sub.TestClock)
	if errors.Is(err, apperr.ErrNotFound) {
		return s.onClock("", s.wall), nil
	}
	if err != nil {
		return nil, fmt.Errorf("test clock of %s: %w", sub.SubscriptionID, err)
	}
	at := c.ReachedTime
	return s.onClock(c.ID, func() time.Time { return at }), nil
}

// onClock is a copy of s on clock, whose time is now.
func (s *Service) onClock(clock string, now func() time.Time) *Service {
	cs := *s
	cs.clock, cs.now = clock, now
	if clock != "" {
		cs.cfg.LockedRetryWait = 0 // untilUnlocked retries sooner
	}
	return &cs
}

// CreateClock creates a test clock frozen at frozen.
func (s *Service) CreateClock(ctx context.Context, frozen time.Time, name string) (Clock, error) {
	if s.cfg.Livemode {
		return Clock{}, ErrLivemode
	}
	if frozen.IsZero() {
		return Clock{}, invalid("frozen_time: required (RFC 3339)")
	}
	if y := frozen.UTC().Year(); y < 2000 || y > 2100 {
		return Clock{}, invalid("frozen_time: a time between the years 2000 and 2100")
	}
	if len(name) > 200 || strings.ContainsAny(name, "\x00\r\n") {
		return Clock{}, invalid("name: at most 200 characters on one line")
	}
	if err := s.checkClockCount(ctx); err != nil {
		return Clock{}, err
	}
	now := s.wall()
	frozen = frozen.UTC().Truncate(time.Second)
	c := Clock{ID: "clock_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:24], Name: name,
		FrozenTime: frozen, ReachedTime: frozen, Status: ClockReady, CreatedAt: now}
	if err := s.store.PutClock(ctx, &c, now); err != nil {
		return Clock{}, err
	}
	return c, nil
}

// GetClock reads a test clock and its latest runs (newest first, at most
// limit). An advance whose replica went away reads as internal_failure.
func (s *Service) GetClock(ctx context.Context, id string, limit int32) (Clock, []ClockRun, error) {
	if s.cfg.Livemode {
		return Clock{}, nil, ErrLivemode
	}
	c, err := s.store.GetClock(ctx, id)
	if err != nil {
		return Clock{}, nil, err
	}
	if c.Status == ClockAdvancing && s.wall().After(c.LeaseUntil) {
		c.Status = ClockFailed
		c.Error = fmt.Sprintf("the advance stopped at %s (its process went away); advance again to continue",
			c.ReachedTime.Format(time.RFC3339))
	}
	if limit <= 0 {
		return c, nil, nil
	}
	runs, err := s.store.ClockRuns(ctx, id, limit)
	if err != nil {
		return Clock{}, nil, err
	}
	return c, runs, nil
}

// ListClocks reads every test clock, newest first.
func (s *Service) ListClocks(ctx context.Context) ([]Clock, error) {
	if s.cfg.Livemode {
		return nil, ErrLivemode
	}
	ids, err := s.store.ListClockIDs(ctx)
	if err != nil {
		return nil, err
	}
	clocks := make([]Clock, 0, len(ids))
	for _, id := range ids {
		c, _, err := s.GetClock(ctx, id, 0)
		if errors.Is(err, apperr.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		clocks = append(clocks, c)
	}
	sort.Slice(clocks, func(i, j int) bool { return clocks[i].CreatedAt.After(clocks[j].CreatedAt) })
	return clocks, nil
}

// ClockSubscriptions reads the subscriptions created on clock id.
func (s *Service) ClockSubscriptions(ctx context.Context, id string) ([]Subscription, error) {
	members, err := s.store.ClockMembers(ctx, id)
	if err != nil {
		return nil, err
	}
	subs := make([]Subscription, 0, len(members))
	for _, m := range members {
		sub, err := s.store.GetSubscription(ctx, m.AccountID, m.SubscriptionID)
		if errors.Is(err, apperr.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// DeleteClock cancels every subscription of the clock (its history says
// why) and removes the clock. Refused while it advances.
func (s *Service) DeleteClock(ctx context.Context, id string) error {
	if s.cfg.Livemode {
		return ErrLivemode
	}
	c, err := s.store.GetClock(ctx, id)
	if err != nil {
		return err
	}
	if c.Status == ClockAdvancing && !s.wall().After(c.LeaseUntil) {
		return ErrClockBusy
	}
	members, err := s.store.ClockMembers(ctx, id)
	if err != nil {
		return err
	}
	for _, m := range members {
		_, err := s.UpdateSubscription(ctx, m.AccountID, m.SubscriptionID, Change{Action: "cancel", Cause: "test-clock-deleted:" + id})
		if err != nil && !errors.Is(err, apperr.ErrNotFound) {
			return fmt.Errorf("cancel %s/%s: %w", m.AccountID, m.SubscriptionID, err)
		}
	}
	return s.store.DeleteClockItems(ctx, id)
}

// ClockMember names one subscription of a test clock.
type ClockMember struct{ AccountID, SubscriptionID string }

// ClockRun is one day of a test clock's advance: the reminder and
// collection jobs run at Time (job date Date).
type ClockRun struct {
	Time time.Time
	Date dates.Date
	// Entries read from the clock's index partitions by both jobs.
	Entries       int
	Reminded      int
	Charged       int // succeeded
	Processing    int // bank debits submitted (ACHSENT)
	Declined      int
	Stale         int
	PausedSkipped int
	Unresolved    int
	Errors        int
	// Error: why the advance stopped at this run (status internal_failure).
	Error string
}
