// Package testclock is the test-clock service (docs/design.md §4, docs/billing.md),
// after Stripe's own: a clock is a frozen time that its subscriptions take
// as "now" for every decision, and that only moves when advanced. An advance
// runs, for the clock's subscriptions only, the reminder and collection jobs
// of every day up to the new time, through the very code of the real jobs
// (billing's Remind and Collect: same lock, idempotency keys, history,
// receipts, actions, Stripe calls), on a copy of the billing service whose
// clock is the test clock's (Billing.DailyOn).
//
// The billing core knows only that a subscription may live on a clock
// (internal/billing/env: ForSub, OnClock); it never imports this package.
package testclock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/jobs"
	"github.com/stripe-payments/stripe-payments/internal/billing/lifecycle"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/safego"
)

// MaxAdvanceYears bounds one advance (docs/design.md §4).
const MaxAdvanceYears = 3

// ErrBusy: the clock is being advanced.
var ErrBusy = apperr.New(apperr.CodeConflict, "the test clock is advancing; wait until its status is ready")

// Store keeps the test clocks; the billing store implements it.
type Store interface {
	model.ClockReader
	// PutClock writes c if it is still at c.Version (0: creates it) and
	// advances c.Version; model.ErrConflict when it changed meanwhile.
	PutClock(ctx context.Context, c *model.Clock, now time.Time) error
	ClockMembers(ctx context.Context, clock string) ([]model.ClockMember, error)
	PutClockRun(ctx context.Context, clock string, r model.ClockRun) error
	ClockRuns(ctx context.Context, clock string, limit int32) ([]model.ClockRun, error)
	DeleteClockItems(ctx context.Context, clock string) error
	// RenewClockLease extends the lease of an advancing clock held by owner
	// and records how far it got; model.ErrConflict when owner no longer
	// holds it.
	RenewClockLease(ctx context.Context, id, owner string, reached, until, now time.Time) error
	GetSubscription(ctx context.Context, account, id string) (model.Subscription, error)
	// ListPeriods and GetPeriod read a clock subscription's periods: its
	// bank debits waiting to settle (settle.go).
	ListPeriods(ctx context.Context, account, sub string) ([]model.Period, error)
	GetPeriod(ctx context.Context, account, sub string, d dates.Date) (model.Period, error)
}

// Config bounds the test clocks (limits.go).
type Config struct {
	// Lease is how long an advancing clock stays claimed by its replica
	// without a heartbeat (another may take over after it).
	Lease time.Duration
	// MaxClocks bounds the clocks that may exist at once (TEST_CLOCKS_MAX);
	// MaxAdvancing the advances this instance runs at once.
	MaxClocks, MaxAdvancing int
	// SettleWait bounds, in wall time, how long an advance waits on a bank
	// debit's settlement day for Stripe's outcome (TEST_CLOCK_SETTLE_WAIT;
	// negative: it does not wait). settle.go says why.
	SettleWait time.Duration
}

// DefaultConfig is the test clocks' default bounds.
func DefaultConfig() Config {
	return Config{Lease: 2 * time.Minute, MaxClocks: config.DefaultTestClocksMax, MaxAdvancing: DefaultMaxAdvancing,
		SettleWait: DefaultSettleWait}
}

// Billing is the billing core as the test clocks use it (billing.Service):
// it runs the days of an advance and cancels a deleted clock's
// subscriptions; its configuration says whether Stripe is live.
type Billing interface {
	// DailyOn is the daily jobs on test clock clock, whose time is now.
	DailyOn(clock string, now func() time.Time) jobs.Daily
	Config() model.Config
	UpdateSubscription(ctx context.Context, account, subID string, ch lifecycle.Change) (model.Subscription, error)
}

// Deps are the service's collaborators.
type Deps struct {
	Billing Billing
	Store   Store
	// Now is the real time (leases, run stamps); default time.Now.
	Now func() time.Time
	Log *slog.Logger
	// Safe starts the advances and their heartbeats, recovering a panic
	// (nil: a starter that only logs).
	Safe *safego.Starter
	// Runs, when set, records each job of a clock's day that found
	// something to do or failed, for the console's list of billing runs.
	Runs RunRecorder
}

// RunRecorder records one job of a test clock's day (opsdata.Runs).
type RunRecorder interface {
	RecordClockRun(ctx context.Context, clock, job string, date time.Time, started time.Time, rep *model.Report, err error) error
}

// Service creates, reads, advances and deletes test clocks.
type Service struct {
	cfg     Config
	billing Billing
	store   Store
	wall    func() time.Time
	log     *slog.Logger
	safe    *safego.Starter
	runs    RunRecorder
	// advances tracks the advances in flight (Wait); advancing holds a
	// token per advance this instance runs (MaxAdvancing).
	advances  sync.WaitGroup
	advancing chan struct{}
}

// New returns the service; zero Config fields take DefaultConfig's.
func New(cfg Config, d Deps) (*Service, error) {
	def := DefaultConfig()
	if cfg.Lease <= 0 {
		cfg.Lease = def.Lease
	}
	if cfg.MaxClocks <= 0 {
		cfg.MaxClocks = def.MaxClocks
	}
	if cfg.MaxAdvancing <= 0 {
		cfg.MaxAdvancing = def.MaxAdvancing
	}
	if cfg.SettleWait == 0 {
		cfg.SettleWait = def.SettleWait
	}
	if d.Billing == nil || d.Store == nil {
		return nil, errors.New("testclock: billing and store are required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Service{cfg: cfg, billing: d.Billing, store: d.Store, wall: d.Now, log: d.Log,
		safe: d.Safe.OrDefault(d.Log), runs: d.Runs, advancing: make(chan struct{}, cfg.MaxAdvancing)}, nil
}

// livemode: test clocks are refused with a live Stripe key.
func (s *Service) livemode() bool { return s.billing.Config().Livemode }

// CreateClock creates a test clock frozen at frozen.
func (s *Service) CreateClock(ctx context.Context, frozen time.Time, name string) (model.Clock, error) {
	if s.livemode() {
		return model.Clock{}, model.ErrLivemode
	}
	if frozen.IsZero() {
		return model.Clock{}, apperr.Invalid("frozen_time: required (RFC 3339)")
	}
	if y := frozen.UTC().Year(); y < 2000 || y > 2100 {
		return model.Clock{}, apperr.Invalid("frozen_time: a time between the years 2000 and 2100")
	}
	if len(name) > 200 || strings.ContainsAny(name, "\x00\r\n") {
		return model.Clock{}, apperr.Invalid("name: at most 200 characters on one line")
	}
	if err := s.checkClockCount(ctx); err != nil {
		return model.Clock{}, err
	}
	now := s.wall()
	frozen = frozen.UTC().Truncate(time.Second)
	c := model.Clock{ID: "clock_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:24], Name: name,
		FrozenTime: frozen, ReachedTime: frozen, Status: model.ClockReady, CreatedAt: now}
	if err := s.store.PutClock(ctx, &c, now); err != nil {
		return model.Clock{}, err
	}
	return c, nil
}

// GetClock reads a test clock and its latest runs (newest first, at most
// limit). An advance whose replica went away reads as internal_failure.
func (s *Service) GetClock(ctx context.Context, id string, limit int32) (model.Clock, []model.ClockRun, error) {
	if s.livemode() {
		return model.Clock{}, nil, model.ErrLivemode
	}
	c, err := s.store.GetClock(ctx, id)
	if err != nil {
		return model.Clock{}, nil, err
	}
	if c.Status == model.ClockAdvancing && s.wall().After(c.LeaseUntil) {
		c.Status = model.ClockFailed
		c.Error = fmt.Sprintf("the advance stopped at %s (its process went away); advance again to continue",
			c.ReachedTime.Format(time.RFC3339))
	}
	if limit <= 0 {
		return c, nil, nil
	}
	runs, err := s.store.ClockRuns(ctx, id, limit)
	if err != nil {
		return model.Clock{}, nil, err
	}
	return c, runs, nil
}

// ListClocks reads every test clock, newest first.
func (s *Service) ListClocks(ctx context.Context) ([]model.Clock, error) {
	if s.livemode() {
		return nil, model.ErrLivemode
	}
	ids, err := s.store.ListClockIDs(ctx)
	if err != nil {
		return nil, err
	}
	clocks := make([]model.Clock, 0, len(ids))
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
func (s *Service) ClockSubscriptions(ctx context.Context, id string) ([]model.Subscription, error) {
	members, err := s.store.ClockMembers(ctx, id)
	if err != nil {
		return nil, err
	}
	subs := make([]model.Subscription, 0, len(members))
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
	if s.livemode() {
		return model.ErrLivemode
	}
	c, err := s.store.GetClock(ctx, id)
	if err != nil {
		return err
	}
	if c.Status == model.ClockAdvancing && !s.wall().After(c.LeaseUntil) {
		return ErrBusy
	}
	members, err := s.store.ClockMembers(ctx, id)
	if err != nil {
		return err
	}
	for _, m := range members {
		_, err := s.billing.UpdateSubscription(ctx, m.AccountID, m.SubscriptionID,
			lifecycle.Change{Action: "cancel", Cause: "test-clock-deleted:" + id})
		if err != nil && !errors.Is(err, apperr.ErrNotFound) {
			return fmt.Errorf("cancel %s/%s: %w", m.AccountID, m.SubscriptionID, err)
		}
	}
	return s.store.DeleteClockItems(ctx, id)
}
