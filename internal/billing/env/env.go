// Package env is what every part of the billing core runs with: its
// configuration, its collaborators (store, account locks, Stripe, the
// notifier, the observer) and the clock it runs on: real time, or a test
// clock's (docs/design.md §4). The parts (collect, feed, lifecycle, reads,
// remind) each hold one Env; none of them holds another's state.
package env

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/schedule"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/safego"
)

// Deps are the billing core's collaborators.
type Deps struct {
	Store    model.Store
	Locks    *lock.Client
	Charger  model.Charger
	Notifier model.Notifier
	Now      func() time.Time
	Log      *slog.Logger
	// Observer receives the money-safety metrics (nil: none).
	Observer model.Observer
	// Safe runs each account's work of a job, recovering a panic (nil: a
	// starter that only logs).
	Safe *safego.Starter
}

// Env is the configuration, the collaborators and the clock of the billing
// core. A copy on another clock (OnClock, ForSub) shares the collaborators.
type Env struct {
	Cfg      model.Config
	Store    model.Store
	Locks    *lock.Client
	Charger  model.Charger // nil: nothing may be charged (the jobs refuse to run)
	Notifier model.Notifier
	Log      *slog.Logger
	Obs      model.Observer
	Safe     *safego.Starter
	Sched    schedule.Schedule

	// Clock is the test clock this Env runs the jobs of ("" for real
	// time); Now is then the clock's time, and Wall the real time (leases,
	// receipt expiry, Stripe's idempotency window).
	Clock string
	Now   func() time.Time
	Wall  func() time.Time

	// hard is the set of Config.HardDeclineCodes.
	hard map[string]bool
}

// New checks cfg, fills in its defaults and d's, and returns the Env on
// real time.
func New(cfg model.Config, d Deps) (*Env, error) {
	def := model.DefaultConfig()
	if cfg.Shards < 1 {
		cfg.Shards = def.Shards
	}
	if cfg.WorkersPerShard < 1 {
		cfg.WorkersPerShard = def.WorkersPerShard
	}
	if cfg.ReminderDays < 0 {
		return nil, errors.New("billing: reminder days must not be negative")
	}
	if cfg.Retry.StaleDays == 0 {
		cfg.Retry = def.Retry
	}
	if err := cfg.Retry.Validate(); err != nil {
		return nil, fmt.Errorf("billing: retry policy: %w", err)
	}
	if cfg.ReceiptTTL <= 0 {
		cfg.ReceiptTTL = def.ReceiptTTL
	}
	if cfg.IdempotencyWindow <= 0 {
		cfg.IdempotencyWindow = def.IdempotencyWindow
	}
	if cfg.HardDeclineCodes == nil {
		cfg.HardDeclineCodes = def.HardDeclineCodes
	}
	if cfg.TriggerMinGap <= 0 {
		cfg.TriggerMinGap = def.TriggerMinGap
	}
	if cfg.MaxPauseMonths <= 0 {
		cfg.MaxPauseMonths = def.MaxPauseMonths
	}
	if d.Store == nil || d.Locks == nil {
		return nil, errors.New("billing: store and locks are required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Observer == nil {
		d.Observer = model.NopObserver{}
	}
	if d.Notifier == nil {
		d.Notifier = model.LogNotifier{Log: d.Log}
	}
	return &Env{Cfg: cfg, Store: d.Store, Locks: d.Locks, Charger: d.Charger, Notifier: d.Notifier,
		Now: d.Now, Wall: d.Now, Log: d.Log, Obs: d.Observer, Safe: d.Safe.OrDefault(d.Log),
		hard:  model.HardCodes(cfg.HardDeclineCodes),
		Sched: schedule.Schedule{ReminderDays: cfg.ReminderDays, Periods: d.Store}}, nil
}

// Today is the current date in the subscription's time zone.
func (e *Env) Today(sub model.Subscription) dates.Date { return dates.In(e.Now(), sub.Location()) }

// HardDecline reports whether Stripe's decline code is one retrying cannot
// fix (internal/billing/model/decline.go).
func (e *Env) HardDecline(code string) bool { return code != "" && e.hard[code] }

// Cause names an attempt of job on p in the history ("collect:<today>:attempt-n").
func (e *Env) Cause(job string, p model.Period, today dates.Date) string {
	return fmt.Sprintf("%s:%s:attempt-%d", job, today, p.Attempts+1)
}

// WithLock runs fn holding the account's billing lock (Lock, Unlock).
func (e *Env) WithLock(ctx context.Context, account string, fn func(ctx context.Context, l *lock.Lock) error) error {
	l, err := e.Lock(ctx, account)
	if err != nil {
		return err
	}
	return e.Unlock(ctx, account, l, fn(ctx, l))
}

// Lock takes the account's billing lock (fail if locked: model.ErrLocked).
func (e *Env) Lock(ctx context.Context, account string) (*lock.Lock, error) {
	l, err := e.Locks.Acquire(ctx, model.LockKey(account), true)
	if errors.Is(err, lock.ErrAlreadyLocked) {
		return nil, fmt.Errorf("account %s: %w", account, model.ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("lock account %s: %w", account, err)
	}
	return l, nil
}

// Unlock gives back the lock of work that ended with err, and returns err:
// released, or abandoned on a crash (model.ErrCrash), as a dead process
// leaves it (the next holder takes it over after the lease).
func (e *Env) Unlock(ctx context.Context, account string, l *lock.Lock, err error) error {
	if errors.Is(err, model.ErrCrash) {
		l.Abandon()
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if rerr := l.Release(rctx); rerr != nil {
		e.Log.Warn("could not release billing lock", "account", account, "error", rerr)
	}
	return err
}

// Test clocks (docs/design.md §4), after Stripe's own: a clock is a frozen
// time that its subscriptions take as "now" for every decision, and that
// only moves when advanced. The clocks themselves (create, advance, delete)
// are package testclock's; the billing core only knows that a subscription
// may live on one: it then acts on it through a copy of its Env whose now
// is the clock's (ForSub, OnClock), with the very code of real time.
//
// Isolation: a clock's subscriptions and periods carry its id, which puts
// their index entries in partitions of their own ("<clock>#<date>#0"); the
// real-time jobs never read those, and a clock's jobs read only its
// clock's. Each clock has its own sweep watermark.

// ForSub is the Env to act on sub with: e itself for a subscription on real
// time (or on the clock e already runs), else a copy whose now is the test
// clock's. A deleted clock's subscriptions (cancelled with it) are acted on
// in real time: a late webhook about one still applies.
func (e *Env) ForSub(ctx context.Context, sub model.Subscription) (*Env, error) {
	if sub.TestClock == e.Clock {
		return e, nil
	}
	if sub.TestClock == "" {
		return e.OnClock("", e.Wall), nil
	}
	c, err := e.Store.GetClock(ctx, sub.TestClock)
	if errors.Is(err, apperr.ErrNotFound) {
		return e.OnClock("", e.Wall), nil
	}
	if err != nil {
		return nil, fmt.Errorf("test clock of %s: %w", sub.SubscriptionID, err)
	}
	at := c.ReachedTime
	return e.OnClock(c.ID, func() time.Time { return at }), nil
}

// OnClock is a copy of e on test clock clock ("": real time), whose time is
// now: its jobs read only that clock's index partitions.
func (e *Env) OnClock(clock string, now func() time.Time) *Env {
	ce := *e
	ce.Clock, ce.Now = clock, now
	if clock != "" {
		ce.Cfg.LockedRetryWait = 0 // an advance retries a locked account sooner itself
	}
	return &ce
}
