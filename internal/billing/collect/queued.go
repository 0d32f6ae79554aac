package collect

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billingqueue"
)

// The billing queue (docs/billing.md "Billing queue"): with
// BILLING_QUEUE_URL set, a collection run pages the due index shard by
// shard as the in-process run does (jobs.Runner.EachAccount) but hands each
// account to the queue instead of collecting it; the workers of every
// replica collect each account through CollectAccount, under the account's
// lock, with the very per-account path of the in-process run
// (collectAccount: same idempotency keys, history and budget class).
//
// The sweep watermark moves on only when the whole run is known clean:
// when its last message ended (QueueRunDrained), not when it was enqueued.

// Queue is the billing queue a Collector's runs go through, shared by its
// copies on other clocks.
type Queue struct {
	enq *billingqueue.Enqueuer
	// poll: how often a test clock's run looks whether its queue drained.
	poll time.Duration
	// registered: the Stripe accounts this process registered for the
	// poller already (one write per account per process, not per charge).
	registered sync.Map
}

// NewQueue is the billing queue over enq (nil: none).
func NewQueue(enq *billingqueue.Enqueuer) *Queue {
	if enq == nil {
		return nil
	}
	return &Queue{enq: enq, poll: 100 * time.Millisecond}
}

// UseQueue makes the collector's runs enqueue their accounts (nil: collect
// in process). Call it before the collector is used.
func (c *Collector) UseQueue(q *Queue) { c.queue = q }

// enqueueCollect is Collect with the queue: it sends every account with
// something due by date to the queue. A test clock's run then waits for the
// queue to drain, since the clock's next day must find this one's charges
// made; its report adds up what the workers did.
func (q *Queue) enqueueCollect(ctx context.Context, c *Collector, date dates.Date) (*model.Report, error) {
	const job = "collect"
	rep := &model.Report{Job: job, Date: date.String()}
	from, err := c.runner.SweepFrom(ctx, job, date)
	if err != nil {
		return rep, err
	}
	rep.SweptFrom = from.String()
	var clockNow time.Time
	if c.Clock != "" {
		clockNow = c.Now()
	}
	out, err := q.enq.Enqueue(ctx, billingqueue.RunStart{Job: job, Clock: c.Clock, Date: date}, clockNow,
		func(ctx context.Context, add billingqueue.Add) error {
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			readErr := c.runner.EachAccount(ctx, model.PaymentsIndex, from, date, rep, func(account string, entries []model.IndexEntry) {
				if err := add(account, queueEntries(entries)); err != nil {
					cancel(err)
				}
			})
			return errors.Join(readErr, context.Cause(ctx))
		})
	rep.Queue = &model.QueueRun{Run: out.Run.ID, Enqueued: out.Messages, Joined: out.Joined}
	c.Log.Info("billing job: collection run enqueued", "date", date.String(), "run", out.Run.ID, "accounts", out.Accounts,
		"messages", out.Messages, "joined", out.Joined, "entries", rep.Entries)
	if err != nil || c.Clock == "" || out.Run.ID == "" {
		return rep, err
	}
	p, err := q.awaitDrained(ctx, c, out.Run.ID)
	if err != nil {
		return rep, err
	}
	rep.Queue.Drained = true
	addProgress(rep, p)
	return rep, nil
}

// awaitDrained waits until every message of run ended, closes the drained
// runs it finds (as the workers' watch does) and returns run's progress.
func (q *Queue) awaitDrained(ctx context.Context, c *Collector, run string) (billingqueue.Progress, error) {
	runs := q.enq.Runs()
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
				c.QueueRunDrained(ctx, d)
			}
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("billing queue: run %s not drained (%d of %d messages ended): %w", run, p.Done(), p.Enqueued, context.Cause(ctx))
		case <-time.After(q.poll):
		}
	}
}

// addProgress adds what the workers did to a test clock run's report.
func addProgress(rep *model.Report, p billingqueue.Progress) {
	c := p.Counts
	rep.Add(func(r *model.Report) {
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
		rep.Because("billing queue", fmt.Errorf("%d message(s) went to the dead-letter queue (see the incidents)", p.Dead))
	}
}

func queueEntries(es []model.IndexEntry) []billingqueue.Entry {
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
func (c *Collector) CollectAccount(ctx context.Context, m billingqueue.Message) (billingqueue.Counts, error) {
	if m.Job != "collect" {
		return billingqueue.Counts{}, fmt.Errorf("billing queue: job %q is not queued", m.Job)
	}
	if c.Charger == nil {
		return billingqueue.Counts{}, errors.New("billing queue: no Stripe charger configured")
	}
	// The worker's collector is real time's; a test clock's account is
	// collected at the clock's time of the run.
	cc := c
	if m.Clock != "" {
		now := m.ClockNow
		cc = c.onClock(m.Clock, func() time.Time { return now })
	} else if c.Clock != "" {
		cc = c.onClock("", c.Wall)
	}
	entries := make([]model.IndexEntry, len(m.Entries))
	for i, e := range m.Entries {
		entries[i] = model.IndexEntry{PK: e.PK, SK: e.SK, Date: e.Date, AccountID: m.Account, Kind: model.EntryKind(e.Kind)}
	}
	rep := &model.Report{Job: m.Job, Date: m.Date.String(), Entries: len(entries)}
	err := cc.Safe.Do("billing_account", func() error { return cc.collectAccount(ctx, m.Account, entries, m.Date, rep) })
	c.queue.register(ctx, c, rep)
	counts := countsOf(rep)
	if errors.Is(err, model.ErrLocked) {
		return counts, fmt.Errorf("%w: %w", billingqueue.ErrLocked, err)
	}
	return counts, err
}

// register registers for the poller the Stripe accounts a queued account
// was charged on, each once per process.
func (q *Queue) register(ctx context.Context, c *Collector, rep *model.Report) {
	if q == nil {
		return
	}
	var fresh []string
	for _, a := range rep.ChargedAccounts() {
		if _, seen := q.registered.Load(a); !seen {
			fresh = append(fresh, a)
		}
	}
	if len(fresh) == 0 {
		return
	}
	if err := c.Store.RegisterChargedAccounts(context.WithoutCancel(ctx), fresh...); err != nil {
		c.Log.Warn("billing queue: could not register the Stripe accounts charged on (the poller may miss them until a later charge)", "error", err)
		return
	}
	for _, a := range fresh {
		q.registered.Store(a, true)
	}
}

func countsOf(rep *model.Report) billingqueue.Counts {
	var c billingqueue.Counts
	rep.Add(func(r *model.Report) {
		c = billingqueue.Counts{Entries: r.Entries, Reminded: r.Reminded, Succeeded: r.Succeeded, Processing: r.Processing,
			Declined: r.Declined, Stale: r.Stale, PausedSkipped: r.PausedSkipped, Resumed: r.Resumed, Skipped: r.Skipped,
			PaidByCustomer: r.PaidByCustomer, Unknown: r.Unknown, Resolved: r.Resolved, Unresolved: r.Unresolved, Errors: r.Errors}
	})
	return c
}

// QueueRunDrained ends a queued collection run once its last message
// ended (the workers' watch calls it on one replica): the unresolved
// gauge, and the sweep watermark moved on when the run left nothing
// behind, as the in-process run's end does.
func (c *Collector) QueueRunDrained(ctx context.Context, p billingqueue.Progress) {
	if p.Job != "collect" {
		return
	}
	cc := c.onClock(p.Clock, c.Now)
	if p.Clock == "" {
		cc.runner.SetGauge(p.Date, p.Counts.Unresolved)
	}
	if !p.Clean() {
		c.Log.Warn("billing queue: run drained with failures; the next run reads its partitions again",
			"run", p.ID, "date", p.Date.String(), "test_clock", p.Clock, "incomplete", p.Incomplete, "dead", p.Dead)
		return
	}
	// Two days back, as the in-process run's end: an entry of the last
	// days may not be due yet in its own time zone.
	if err := cc.runner.AdvanceSweep(context.WithoutCancel(ctx), "collect", p.Date.AddDays(-2)); err != nil {
		c.Log.Warn("billing queue: could not advance the sweep watermark (the next run reads further back)", "run", p.ID, "error", err)
	}
}
