package billing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingqueue"
)

// The billing queue (docs/billing.md "Billing queue"): with
// BILLING_QUEUE_URL set, a collection run pages the due index shard by
// shard as the in-process run does (eachShard, readShard) but hands each
// account to the queue instead of collecting it; the workers of every
// replica collect each account through CollectAccount, under the account's
// lock, with the very per-account path of the in-process run (account,
// collectEntry: same idempotency keys, history and budget class).
//
// The sweep watermark moves on only when the whole run is known clean:
// when its last message ended (QueueRunDrained), not when it was enqueued.

// QueueRun is what a queued collection run did in the process that ran it
// (Report.Queue).
type QueueRun struct {
	// Run is the queued run's id: its progress across replicas is
	// GET /internal/v1/billing/runs/{id} and the console's runs page.
	Run string `json:"run"`
	// Enqueued: messages sent (one per account with something due).
	Enqueued int `json:"enqueued"`
	// Joined: a run of the same date was open (enqueuing or draining), so
	// this one sent nothing.
	Joined bool `json:"joined,omitempty"`
	// Drained: a test clock's run waited until every message ended.
	Drained bool `json:"drained,omitempty"`
}

// queued is the service's billing queue, shared by its clock copies.
type queued struct {
	enq *billingqueue.Enqueuer
	// poll: how often a test clock's run looks whether its queue drained.
	poll time.Duration
	// registered: the Stripe accounts this process registered for the
	// poller already (one write per account per process, not per charge).
	registered sync.Map
}

// UseQueue makes the service's collection runs enqueue their accounts
// (nil: collect in process). Call it before the service is used.
func (s *Service) UseQueue(enq *billingqueue.Enqueuer) {
	if enq == nil {
		s.queued = nil
		return
	}
	s.queued = &queued{enq: enq, poll: 100 * time.Millisecond}
}

// Queued reports whether collection runs go through the billing queue.
func (s *Service) Queued() bool { return s.queued != nil }

// enqueueCollect is Collect with the queue: it sends every account with
// something due by date to the queue. A test clock's run then waits for the
// queue to drain, since the clock's next day must find this one's charges
// made; its report adds up what the workers did.
func (s *Service) enqueueCollect(ctx context.Context, date dates.Date) (*Report, error) {
	const job = "collect"
	rep := &Report{Job: job, Date: date.String()}
	from, err := s.sweepFrom(ctx, s.sweepKey(job), date)
	if err != nil {
		return rep, err
	}
	rep.SweptFrom = from.String()
	var clockNow time.Time
	if s.clock != "" {
		clockNow = s.now()
	}
	out, err := s.queued.enq.Enqueue(ctx, billingqueue.RunStart{Job: job, Clock: s.clock, Date: date}, clockNow,
		func(ctx context.Context, add billingqueue.Add) error {
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			readErr := s.eachShard(ctx, PaymentsIndex, from, date, rep, func(w accountWork) {
				if err := add(w.account, queueEntries(w.entries)); err != nil {
					cancel(err)
				}
			})
			return errors.Join(readErr, context.Cause(ctx))
		})
	rep.Queue = &QueueRun{Run: out.Run.ID, Enqueued: out.Messages, Joined: out.Joined}
	s.log.Info("billing job: collection run enqueued", "date", date.String(), "run", out.Run.ID, "accounts", out.Accounts,
		"messages", out.Messages, "joined", out.Joined, "entries", rep.Entries)
	if err != nil || s.clock == "" || out.Run.ID == "" {
		return rep, err
	}
	p, err := s.awaitDrained(ctx, out.Run.ID)
	if err != nil {
		return rep, err
	}
	rep.Queue.Drained = true
	addProgress(rep, p)
	return rep, nil
}

// awaitDrained waits until every message of run ended, closes the drained
// runs it finds (as the workers' watch does) and returns run's progress.
func (s *Service) awaitDrained(ctx context.Context, run string) (billingqueue.Progress, error) {
	runs := s.queued.enq.Runs()
	for {
		p, err := runs.Progress(ctx, run)
		if err != nil {
			return p, fmt.Errorf("billing queue: progress of run %s: %w", run, err)
		}
		if p.EnqueueDone && p.Done() >= p.Enqueued {
			drained, err := runs.CloseDrained(ctx)
			if err != nil {
				return p, err
			}
			for _, d := range drained {
				s.QueueRunDrained(ctx, d)
			}
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("billing queue: run %s not drained (%d of %d messages ended): %w", run, p.Done(), p.Enqueued, context.Cause(ctx))
		case <-time.After(s.queued.poll):
		}
	}
}

// addProgress adds what the workers did to a test clock run's report.
func addProgress(rep *Report, p billingqueue.Progress) {
	c := p.Counts
	rep.add(func(r *Report) {
		r.Reminded += c.Reminded
		r.Succeeded += c.Succeeded
		r.Processing += c.Processing
		r.Declined += c.Declined
		r.Stale += c.Stale
		r.PausedSkipped += c.PausedSkipped
		r.Resumed += c.Resumed
		r.Skipped += c.Skipped
		r.PaidByCustomer += c.PaidByCustomer
		r.Unknown += c.Unknown
		r.Resolved += c.Resolved
		r.Unresolved += c.Unresolved
		// A dead letter failed its account: an error of the run.
		r.Errors += c.Errors + p.Dead
	})
	if p.Dead > 0 {
		rep.because("billing queue", fmt.Errorf("%d message(s) went to the dead-letter queue (see the incidents)", p.Dead))
	}
}

func queueEntries(es []IndexEntry) []billingqueue.Entry {
	out := make([]billingqueue.Entry, len(es))
	for i, e := range es {
		out[i] = billingqueue.Entry{PK: e.PK, SK: e.SK, Date: e.Date, Kind: int(e.Kind)}
	}
	return out
}

// CollectAccount collects one queued account (billingqueue.AccountCollector)
// under its lock, on the run's test clock when it has one: the in-process
// run's per-account path for the entries the run read. Entry failures are
// counted (the run is incomplete, as in process); an account-level failure
// (its lock, a crash) is returned and the message comes back.
func (s *Service) CollectAccount(ctx context.Context, m billingqueue.Message) (billingqueue.Counts, error) {
	if m.Job != "collect" {
		return billingqueue.Counts{}, fmt.Errorf("billing queue: job %q is not queued", m.Job)
	}
	if s.charger == nil {
		return billingqueue.Counts{}, errors.New("billing queue: no Stripe charger configured")
	}
	// The worker's service is real time's; a test clock's account is
	// collected at the clock's time of the run.
	svc := s
	if m.Clock != "" {
		now := m.ClockNow
		svc = s.OnClock(m.Clock, func() time.Time { return now })
	} else if s.clock != "" {
		svc = s.OnClock("", s.wall)
	}
	w := accountWork{account: m.Account, entries: make([]IndexEntry, len(m.Entries))}
	for i, e := range m.Entries {
		w.entries[i] = IndexEntry{PK: e.PK, SK: e.SK, Date: e.Date, AccountID: m.Account, Kind: EntryKind(e.Kind)}
	}
	rep := &Report{Job: m.Job, Date: m.Date.String(), Entries: len(w.entries)}
	err := svc.safe.Do("billing_account", func() error { return svc.account(ctx, w, m.Date, true, svc.collectEntry, rep) })
	svc.registerQueued(ctx, rep)
	c := countsOf(rep)
	if errors.Is(err, ErrLocked) {
		return c, fmt.Errorf("%w: %w", billingqueue.ErrLocked, err)
	}
	return c, err
}

// registerQueued registers for the poller the Stripe accounts a queued
// account was charged on, each once per process.
func (s *Service) registerQueued(ctx context.Context, rep *Report) {
	var fresh []string
	for a := range rep.chargedOn {
		if _, seen := s.queued.registered.Load(a); !seen {
			fresh = append(fresh, a)
		}
	}
	if len(fresh) == 0 {
		return
	}
	if err := s.store.RegisterChargedAccounts(context.WithoutCancel(ctx), fresh...); err != nil {
		s.log.Warn("billing queue: could not register the Stripe accounts charged on (the poller may miss them until a later charge)", "error", err)
		return
	}
	for _, a := range fresh {
		s.queued.registered.Store(a, true)
	}
}

func countsOf(r *Report) billingqueue.Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return billingqueue.Counts{Entries: r.Entries, Reminded: r.Reminded, Succeeded: r.Succeeded, Processing: r.Processing,
		Declined: r.Declined, Stale: r.Stale, PausedSkipped: r.PausedSkipped, Resumed: r.Resumed, Skipped: r.Skipped,
		PaidByCustomer: r.PaidByCustomer, Unknown: r.Unknown, Resolved: r.Resolved, Unresolved: r.Unresolved, Errors: r.Errors}
}

// QueueRunDrained ends a queued collection run once its last message
// ended (the workers' watch calls it on one replica): the unresolved
// gauge, and the sweep watermark moved on when the run left nothing
// behind, as the in-process run's end does (endSweep).
func (s *Service) QueueRunDrained(ctx context.Context, p billingqueue.Progress) {
	if p.Job != "collect" {
		return
	}
	svc := s.OnClock(p.Clock, s.now)
	if p.Clock == "" {
		s.gauge.set(p.Date, func() { s.obs.UnresolvedPeriods(p.Counts.Unresolved) })
	}
	if !p.Clean() {
		s.log.Warn("billing queue: run drained with failures; the next run reads its partitions again",
			"run", p.ID, "date", p.Date.String(), "test_clock", p.Clock, "incomplete", p.Incomplete, "dead", p.Dead)
		return
	}
	// Two days back, as endSweep: an entry of the last days may not be due
	// yet in its own time zone.
	if err := s.store.AdvanceSweep(context.WithoutCancel(ctx), svc.sweepKey("collect"), p.Date.AddDays(-2)); err != nil {
		s.log.Warn("billing queue: could not advance the sweep watermark (the next run reads further back)", "run", p.ID, "error", err)
	}
}
