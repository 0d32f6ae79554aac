// Package billing is the recurring billing core (docs/design.md §8), as the
// rest of the service sees it: one Service that assembles the core's parts,
// each a package of its own under internal/billing:
//
//   - model: the vocabulary (subscriptions, periods, the Tx, the Report, the
//     Store/Charger/Notifier/Observer interfaces); every part imports it;
//   - settle: the kernel, what one payment outcome does to a period (pure);
//   - schedule: what is due when (the cursor, the reminder);
//   - env: the configuration, the collaborators and the clock the parts
//     run with (real time, or a test clock's);
//   - outcome: records what settle decided (refund, action, write);
//   - jobs: runs a daily job over the due-date indexes (the sweep);
//   - collect: the collection job, pay now, batches, unknown outcomes;
//   - feed: the Stripe events about the core's charges (trust, then settle);
//   - lifecycle: create, change, pause, resume, cancel, waive, reactivate,
//     erase;
//   - remind: the reminder job;
//   - reads: what the API and the console read.
//
// No part imports this package: it only wires them (and keeps the names
// callers have always used, vocabulary.go). The implementations of the
// model's interfaces live at the edge and are wired in by internal/app:
// internal/billing/store (the DynamoDB single table),
// internal/billing/stripecharge (Stripe), internal/billing/notify (the
// Postgres outbox). The core imports no driver (internal/depcheck).
package billing

import (
	"context"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/collect"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/env"
	"github.com/stripe-payments/stripe-payments/internal/billing/feed"
	"github.com/stripe-payments/stripe-payments/internal/billing/jobs"
	"github.com/stripe-payments/stripe-payments/internal/billing/lifecycle"
	"github.com/stripe-payments/stripe-payments/internal/billing/reads"
	"github.com/stripe-payments/stripe-payments/internal/billing/remind"
	"github.com/stripe-payments/stripe-payments/internal/billingqueue"
)

// Deps are the service's collaborators.
type Deps = env.Deps

// Service is the billing core: its parts, on one Env. The parts' methods
// are the Service's (embedded); each part declares its own.
type Service struct {
	env *env.Env
	// gauge: the date of the run that last set the unresolved gauge,
	// shared by the copies on other clocks.
	gauge *jobs.Gauge
	// queue: the billing queue collection runs go through (nil: in
	// process), shared by the copies on other clocks.
	queue *collect.Queue

	*lifecycle.Lifecycle
	*collect.Collector
	*feed.Feed
	*remind.Reminder
	*reads.Reads
}

// New returns the service.
func New(cfg Config, d Deps) (*Service, error) {
	e, err := env.New(cfg, d)
	if err != nil {
		return nil, err
	}
	return assemble(e, &jobs.Gauge{}, nil), nil
}

// assemble builds the parts over e.
func assemble(e *env.Env, gauge *jobs.Gauge, queue *collect.Queue) *Service {
	s := &Service{env: e, gauge: gauge, queue: queue,
		Lifecycle: lifecycle.New(e), Collector: collect.New(e, gauge), Feed: feed.New(e),
		Reminder: remind.New(e, gauge), Reads: &reads.Reads{Env: e}}
	s.Collector.UseQueue(queue)
	return s
}

// UseQueue makes the service's collection runs, and those of its copies
// made after this call, enqueue their accounts on the billing queue (nil:
// collect in process). Call it before the service is used.
func (s *Service) UseQueue(enq *billingqueue.Enqueuer) {
	s.queue = collect.NewQueue(enq)
	s.Collector.UseQueue(s.queue)
}

// Store is the service's store.
func (s *Service) Store() Store { return s.env.Store }

// Config is the service's configuration.
func (s *Service) Config() Config { return s.env.Cfg }

// HardDecline reports whether Stripe's decline code is one retrying cannot
// fix.
func (s *Service) HardDecline(code string) bool { return s.env.HardDecline(code) }

// OnClock is a copy of s on test clock clock ("": real time), whose time is
// now: its jobs read only that clock's index partitions (package testclock
// runs an advance's days through it).
func (s *Service) OnClock(clock string, now func() time.Time) *Service {
	return assemble(s.env.OnClock(clock, now), s.gauge, s.queue)
}

// DailyOn is the daily jobs of a copy of s on test clock clock (OnClock).
func (s *Service) DailyOn(clock string, now func() time.Time) jobs.Daily {
	return s.OnClock(clock, now)
}

// NowDate is the job date of a run without --date: tomorrow in UTC, so
// that subscriptions in time zones ahead of UTC are seen on their own
// date. Each subscription is acted on only once its payment (or reminder)
// date has come in its own time zone.
func (s *Service) NowDate() dates.Date { return dates.In(s.env.Now(), time.UTC).AddDays(1) }

// CollectNow is Collect for the current date (the in-process ticker).
func (s *Service) CollectNow(ctx context.Context) (*Report, error) {
	return s.Collect(ctx, s.NowDate())
}

// RemindNow is Remind for the current date (the in-process ticker).
func (s *Service) RemindNow(ctx context.Context) (*Report, error) { return s.Remind(ctx, s.NowDate()) }
