package billing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/safego"
)

// Config of the billing core (docs/configuration.md).
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
	// HardDeclineCodes is BILLING_HARD_DECLINE_CODES: a period declined
	// with one of these Stripe codes is not retried (decline.go).
	HardDeclineCodes []string
	// ReceiptTTL is BILLING_RECEIPT_TTL: how long receipts are kept.
	ReceiptTTL time.Duration
	// LookbackDays is BILLING_LOOKBACK_DAYS: a job for date D also reads the
	// index partitions of the days before, so a day the job did not run is
	// caught up (what is there was not processed; what was is gone from it).
	LookbackDays int
	// IdempotencyWindow is how long a Stripe idempotency key may be reused:
	// Stripe may prune keys once they are 24 h old. Within it, a rerun
	// resends an attempt in flight with its key; past it a resend could
	// charge twice, so the job asks Stripe for the attempt's PaymentIntent
	// (search by metadata, list by customer), records what happened, and
	// only then makes a new attempt (resolve.go).
	IdempotencyWindow time.Duration
	// PlatformAccount is STRIPE_PLATFORM_ACCOUNT: the platform's own account
	// id, the same as "" (no Stripe-Account) to the webhook feed's checks.
	PlatformAccount string
	// MaxPauseMonths bounds a pause.
	MaxPauseMonths int
	// LockedRetryWait: when a job found accounts locked, it tries them
	// again once after this long (0: never). A lease is enough to take over
	// the lock of a crashed holder.
	LockedRetryWait time.Duration
	// Livemode: STRIPE_API_KEY is a live key. Test clocks are refused.
	Livemode bool
}

// DefaultConfig is the configuration of docs/design.md §8. What a
// BILLING_* variable sets defaults to package config's value, the one
// source; the rest is billing's own.
func DefaultConfig() Config {
	return Config{
		Shards:            config.DefaultBillingShards,
		WorkersPerShard:   config.DefaultBillingWorkers,
		ReminderDays:      config.DefaultBillingReminderDays,
		Retry:             dates.RetryPolicy{Days: config.DefaultBillingRetryDays(), StaleDays: config.DefaultBillingStaleDays},
		HardDeclineCodes:  config.DefaultBillingHardDeclineCodes(),
		ReceiptTTL:        config.DefaultBillingReceiptTTL,
		LookbackDays:      config.DefaultBillingLookbackDays,
		IdempotencyWindow: 23 * time.Hour,
		MaxPauseMonths:    24,
		// A lease and a heartbeat: long enough to take over a crashed
		// holder's lock (app sets it from BILLING_LOCK_*).
		LockedRetryWait: config.DefaultBillingLockLease + config.DefaultBillingLockHeartbeat,
	}
}

// ErrCrash, in the error of a collaborator, means the process is dying
// there (the crash tests inject it: billingtest.Crasher decorates the store
// and the charger): the job stops at once and the account's lock is
// abandoned, not released, as a dead process leaves it; the next holder
// takes it over after the lease.
var ErrCrash = errors.New("injected crash")

// Deps are the service's collaborators.
type Deps struct {
	Store    Store
	Locks    *lock.Client
	Charger  Charger
	Notifier Notifier
	Now      func() time.Time
	Log      *slog.Logger
	// Observer receives the money-safety metrics (nil: none).
	Observer Observer
	// Safe runs each account's work of a job, recovering a panic (nil: a
	// starter that only logs).
	Safe *safego.Starter
}

// Service is the billing core: lifecycle operations, jobs and the feed.
type Service struct {
	cfg      Config
	store    Store
	locks    *lock.Client
	charger  Charger
	notifier Notifier
	now      func() time.Time
	log      *slog.Logger
	obs      Observer

	// clock is the test clock this instance runs the jobs of ("" for real
	// time); now is then the clock's time, and wall the real time (leases,
	// receipt expiry). See clock.go.
	clock string
	wall  func() time.Time
	safe  *safego.Starter
	// hard is the set of Config.HardDeclineCodes.
	hard map[string]bool
	// gauge: the date of the run that last set the unresolved gauge.
	gauge *gaugeDate
	// queued: the billing queue, when collection runs go through it.
	queued *queued
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
	if cfg.HardDeclineCodes == nil {
		cfg.HardDeclineCodes = def.HardDeclineCodes
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
		d.Observer = nopObserver{}
	}
	if d.Notifier == nil {
		d.Notifier = LogNotifier{Log: d.Log}
	}
	return &Service{cfg: cfg, store: d.Store, locks: d.Locks, charger: d.Charger, notifier: d.Notifier,
		now: d.Now, wall: d.Now, log: d.Log, obs: d.Observer, safe: d.Safe.OrDefault(d.Log),
		hard: hardCodes(cfg.HardDeclineCodes), gauge: &gaugeDate{}}, nil
}

// Store is the service's store.
func (s *Service) Store() Store { return s.store }

// Config is the service's configuration.
func (s *Service) Config() Config { return s.cfg }

// today is the current date in the subscription's time zone.
func (s *Service) today(sub Subscription) dates.Date { return dates.In(s.now(), sub.Location()) }

// LockKey is the key of an account's billing lock (docs/design.md §8). The lock
// package is generic; the key format is billing's.
func LockKey(accountID string) string { return "subscription-billing:user_id:" + accountID }

// withLock runs fn holding the account's billing lock (fail if locked).
func (s *Service) withLock(ctx context.Context, account string, fn func(ctx context.Context, l *lock.Lock) error) error {
	l, err := s.locks.Acquire(ctx, LockKey(account), true)
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
		Term: sub.Term, BillingWeek: sub.BillingWeek, Amount: sub.Amount, Currency: sub.Currency, PaymentDetails: sub.PaymentDetails, Email: sub.Email,
		TestClock: sub.TestClock, Status: status, Process: proc, UpdatedEvent: event, CreatedDate: now,
	}
}

// scheduleReminder points the pending reminder at the period scheduled on
// period, charged on pay: BILLING_REMINDER_DAYS before pay, or today when
// that day has passed. It leaves a reminder that already points at that
// period or a later one (one reminder per period), unless force (the
// period's charge date changed and it was not announced yet).
func (s *Service) scheduleReminder(sub *Subscription, period, pay, today dates.Date, force bool) {
	if !force && !sub.RemindFor.IsZero() && !sub.RemindFor.Before(period) {
		return
	}
	sub.RemindFor = period
	sub.ReminderPending = dates.Date{}
	sub.NextReminderDate = dates.ReminderDate(pay, s.cfg.ReminderDays, today)
}

// chargeDate is the date the period scheduled on period is charged: the
// cursor's may have been moved, later ones are charged on their dates.
func chargeDate(sub Subscription, period dates.Date) dates.Date {
	if period.Equal(sub.NextPeriodDate) && sub.Status == SubActive && !sub.DueDate.IsZero() {
		return sub.DueDate
	}
	return period
}

// point makes p (SCHEDULED or PAUSED) the subscription's next period: the
// cursor, the due date, the next payment, the status (PAUSED while the
// cursor is on a paused period) and the reminder of the next charge.
// force re-announces the next charge (its date changed).
func (s *Service) point(sub *Subscription, p Period, today dates.Date, force bool) {
	sub.NextPeriodDate = p.BillingDate
	next := p.BillingDate
	if p.Status == Paused {
		sub.Status, sub.DueDate = SubPaused, p.BillingDate
		next = sub.Rule().Next(sub.PausedUntil)
		sub.NextPaymentDate = next
	} else {
		if sub.Status == SubPaused {
			sub.Status, sub.PausedFrom, sub.PausedUntil, sub.PauseMonths = SubActive, dates.Date{}, dates.Date{}, 0
		}
		sub.DueDate, sub.NextPaymentDate = p.Due(), p.Due()
	}
	s.scheduleReminder(sub, next, sub.NextPaymentDate, today, force)
}

// advance moves sub's cursor past the period scheduled on from (attempted,
// skipped or given up on) to the next one: the rule's next date, whose
// record is reused when it exists (PAUSED or SCHEDULED already, a period
// cancelled by a rule change scheduled again) or created SCHEDULED;
// periods that already ended (waived ahead) are stepped over.
func (s *Service) advance(ctx context.Context, tx *Tx, sub *Subscription, from, today dates.Date, proc Process, now time.Time) error {
	rule := sub.Rule()
	next := rule.Next(from)
	for range 120 {
		p, err := s.store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, next)
		switch {
		case errors.Is(err, apperr.ErrNotFound):
			p = newPeriod(*sub, next, Scheduled, proc, "scheduled", now)
			tx.PutPeriod(&p, false)
		case err != nil:
			return fmt.Errorf("next period: %w", err)
		case p.Status == Scheduled || p.Status == Paused:
		case p.Status == Cancelled && p.Attempts == 0 && sub.Status != SubCancelled:
			s.reopen(&p, *sub, proc, "rescheduled")
			tx.PutPeriod(&p, false)
		default:
			next = rule.Next(next)
			continue
		}
		s.point(sub, p, today, false)
		return nil
	}
	return fmt.Errorf("next period after %s: no open period within 120 terms", from)
}

// reopen schedules again a period that a rule change had cancelled (the
// rule brought its date back): its next version, with the subscription's
// current amount and payment details.
func (s *Service) reopen(p *Period, sub Subscription, proc Process, event string) {
	p.Status, p.Process, p.UpdatedEvent = Scheduled, proc, event
	p.Term, p.BillingWeek = sub.Term, sub.BillingWeek // a period of the current rule now
	p.Amount, p.Currency, p.PaymentDetails, p.Email = sub.Amount, sub.Currency, sub.PaymentDetails, sub.Email
	p.SKU = sub.SKU // and of its plan (a plan change since it ended)
	p.ChargeDate, p.CompletionDate, p.NextAttemptDate, p.Error, p.PauseDurationMonths = dates.Date{}, time.Time{}, dates.Date{}, "", 0
}
