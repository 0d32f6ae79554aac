package billing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// Config of the billing core (README "Configuration").
type Config struct {
	// Shards is BILLING_SHARDS: GSI write shards per date. Only ever
	// increase it: entries written under a larger count are not found by
	// a smaller one until they are rewritten.
	Shards int
	// WorkersPerShard is BILLING_WORKERS: concurrent accounts per shard.
	WorkersPerShard int
	// ReminderDays is BILLING_REMINDER_DAYS: reminders go out this many days
	// before a payment.
	ReminderDays int
	// Retry is BILLING_RETRY_DAYS and BILLING_STALE_DAYS.
	Retry dates.RetryPolicy
	// ReceiptTTL is BILLING_RECEIPT_TTL: how long receipts are kept.
	ReceiptTTL time.Duration
	// LookbackDays is BILLING_LOOKBACK_DAYS: a job for date D also reads the
	// index partitions of the days before, so a day the job did not run is
	// caught up (what is there was not processed; what was is gone from it).
	LookbackDays int
	// IdempotencyWindow is how long a Stripe idempotency key may be reused:
	// Stripe keeps keys for 24 h. An attempt left in flight for longer is
	// not retried by a job (it could charge twice); its webhook settles it,
	// or an operator does (README runbook).
	IdempotencyWindow time.Duration
	// MaxPauseMonths bounds a pause.
	MaxPauseMonths int
	// LockedRetryWait: when a job found accounts locked, it tries them
	// again once after this long (0: never). A lease is enough to take over
	// the lock of a crashed holder.
	LockedRetryWait time.Duration
}

// DefaultConfig is the configuration of DESIGN §8 and issue 6.
func DefaultConfig() Config {
	return Config{
		Shards: 8, WorkersPerShard: 2, ReminderDays: 7, Retry: dates.DefaultRetryPolicy(),
		ReceiptTTL: 183 * 24 * time.Hour, LookbackDays: 3, IdempotencyWindow: 23 * time.Hour,
		MaxPauseMonths: 24, LockedRetryWait: 61 * time.Second,
	}
}

// Hooks inject failures between the steps of a job (tests and the
// simulation). Step names: "locked", "claimed", "charged", "committed".
type Hooks struct {
	Step func(step string, p Period) error
}

// ErrCrash, returned by a hook, simulates the process dying at that point:
// the lock is abandoned, not released, and the job stops.
var ErrCrash = errors.New("injected crash")

// Deps are the service's collaborators.
type Deps struct {
	Store    *Store
	Locks    *lock.Client
	Charger  *Charger
	Notifier Notifier
	Now      func() time.Time
	Log      *slog.Logger
	Hooks    Hooks
}

// Service is the billing core: lifecycle operations, jobs and the feed.
type Service struct {
	cfg      Config
	store    *Store
	locks    *lock.Client
	charger  *Charger
	notifier Notifier
	now      func() time.Time
	log      *slog.Logger
	hooks    Hooks
}

// New returns the service.
func New(cfg Config, d Deps) (*Service, error) {
	def := DefaultConfig()
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
	if d.Notifier == nil {
		d.Notifier = LogNotifier{Log: d.Log}
	}
	return &Service{cfg: cfg, store: d.Store, locks: d.Locks, charger: d.Charger, notifier: d.Notifier,
		now: d.Now, log: d.Log, hooks: d.Hooks}, nil
}

// Store is the service's store.
func (s *Service) Store() *Store { return s.store }

// Config is the service's configuration.
func (s *Service) Config() Config { return s.cfg }

func (s *Service) step(name string, p Period) error {
	if s.hooks.Step == nil {
		return nil
	}
	return s.hooks.Step(name, p)
}

// today is the current date in the subscription's time zone.
func (s *Service) today(sub Subscription) dates.Date { return dates.In(s.now(), sub.Location()) }

// withLock runs fn holding the account's billing lock (fail if locked).
func (s *Service) withLock(ctx context.Context, account string, fn func(ctx context.Context, l *lock.Lock) error) error {
	l, err := s.locks.Acquire(ctx, lock.Key(account), true)
	if errors.Is(err, lock.ErrAlreadyLocked) {
		return fmt.Errorf("account %s: %w", account, ErrLocked)
	}
	if err != nil {
		return fmt.Errorf("lock account %s: %w", account, err)
	}
	ferr := fn(ctx, l)
	if errors.Is(ferr, ErrCrash) {
		l.Abandon()
		return ferr
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := l.Release(rctx); err != nil {
		s.log.Warn("could not release billing lock", "account", account, "error", err)
	}
	return ferr
}

// newPeriod is a fresh period record of sub dated d.
func newPeriod(sub Subscription, d dates.Date, status Status, proc Process, event string, now time.Time) Period {
	return Period{
		AccountID: sub.AccountID, SubscriptionID: sub.SubscriptionID, SKU: sub.SKU, BillingDate: d,
		Amount: sub.Amount, Currency: sub.Currency, PaymentDetails: sub.PaymentDetails, Email: sub.Email,
		Status: status, Process: proc, UpdatedEvent: event, CreatedDate: now,
	}
}

// scheduleReminder points the pending reminder at the payment on pay,
// unless it already points there or later (the reminder for pay was sent).
// force re-announces pay even then (its date changed).
func (s *Service) scheduleReminder(sub *Subscription, pay, today dates.Date, force bool) {
	if !force && !sub.RemindFor.IsZero() && !sub.RemindFor.Before(pay) {
		return
	}
	sub.RemindFor = pay
	sub.ReminderPending = dates.Date{}
	sub.NextReminderDate = dates.ReminderDate(pay, s.cfg.ReminderDays, today.AddDays(1))
}

// advance moves sub past the period dated from (it has been attempted, or
// given up on): the next payment date, its reminder, and a SCHEDULED record
// for the new period.
func (s *Service) advance(tx *Tx, sub *Subscription, from, today dates.Date, proc Process, now time.Time) {
	next := sub.Rule().Next(from)
	sub.NextPaymentDate = next
	s.scheduleReminder(sub, next, today, false)
	np := newPeriod(*sub, next, Scheduled, proc, "scheduled", now)
	tx.PutPeriod(&np, false)
}
