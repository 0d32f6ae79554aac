package billing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/schedule"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/safego"
)

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
	sched schedule.Schedule
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
		d.Observer = NopObserver{}
	}
	if d.Notifier == nil {
		d.Notifier = LogNotifier{Log: d.Log}
	}
	return &Service{cfg: cfg, store: d.Store, locks: d.Locks, charger: d.Charger, notifier: d.Notifier,
		now: d.Now, wall: d.Now, log: d.Log, obs: d.Observer, safe: d.Safe.OrDefault(d.Log),
		hard: model.HardCodes(cfg.HardDeclineCodes), gauge: &gaugeDate{},
		sched: schedule.Schedule{ReminderDays: cfg.ReminderDays, Periods: d.Store}}, nil
}

// Store is the service's store.
func (s *Service) Store() Store { return s.store }

// Config is the service's configuration.
func (s *Service) Config() Config { return s.cfg }

// today is the current date in the subscription's time zone.
func (s *Service) today(sub Subscription) dates.Date { return dates.In(s.now(), sub.Location()) }

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
