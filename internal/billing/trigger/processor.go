package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/collect"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/lease"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
)

// Collector is the billing core's side of a trigger
// (the collector's CollectTriggered, billing.Service): it collects the account's unpaid
// periods with proc, or returns an error when it charged nothing (then the
// trigger is tried again).
type Collector interface {
	CollectTriggered(ctx context.Context, account string, proc model.Process) (collect.TriggerResult, error)
}

// Observer counts triggers (metrics.Triggers).
type Observer interface {
	// Triggered: a trigger of kind ended with outcome (a collect.Trigger*
	// outcome, or OutcomeDuplicate when its reference was recorded
	// already).
	Triggered(kind, outcome string)
	// Refused: a queue message that is not a trigger, for reason.
	Refused(reason string)
	// Pending: triggers recorded and not collected yet.
	Pending(n int)
}

// OutcomeDuplicate: the trigger's reference was recorded already; it did
// nothing.
const OutcomeDuplicate = "duplicate"

// ProcessorConfig tunes a Processor.
type ProcessorConfig struct {
	// Workers is how many triggers one replica collects at once (0: 2).
	Workers int
	// Lease is how long a worker holds a trigger before another replica
	// may take it over (0: 2 min; longer than one collection).
	Lease time.Duration
	// Poll is how often an idle worker looks for recorded triggers (0:
	// 1 s); Nudge wakes the workers at once.
	Poll time.Duration
	// LockedWait is how long a trigger whose account is locked waits
	// before it is tried again (0: 2 s); Backoff the first wait after an
	// error (0: 5 s), doubling up to 5 min.
	LockedWait, Backoff time.Duration
	// MaxTries: a trigger that failed this many times ends failed (0: 20).
	MaxTries int
	// Timeout bounds one collection; it runs to its end through a
	// shutdown, so that its outcome is recorded (0: 90 s).
	Timeout  time.Duration
	Log      *slog.Logger
	Observer Observer
}

// Processor collects recorded triggers on every replica: each worker leases
// the oldest pending trigger (FOR UPDATE SKIP LOCKED), asks the billing
// core to collect and records what it did.
type Processor struct {
	store     *Store
	collector Collector
	cfg       ProcessorConfig
	lease     *lease.Runner
}

// NewProcessor returns a Processor.
func NewProcessor(store *Store, collector Collector, cfg ProcessorConfig) *Processor {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 2 * time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.LockedWait <= 0 {
		cfg.LockedWait = 2 * time.Second
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 5 * time.Second
	}
	if cfg.MaxTries <= 0 {
		cfg.MaxTries = 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 90 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	l := lease.New(store.pool, lease.Config{Table: "billing_triggers", What: "trigger", Name: "billing triggers",
		Lease: cfg.Lease, Poll: cfg.Poll, Log: cfg.Log})
	return &Processor{store: store, collector: collector, cfg: cfg, lease: l}
}

// Nudge wakes the workers: a trigger was recorded.
func (p *Processor) Nudge() { p.lease.Nudge() }

// Run works until ctx ends; a collection in hand finishes first.
func (p *Processor) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range p.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.lease.Run(ctx, p.RunOnce, p.observePending)
		}()
	}
	wg.Wait()
}

func (p *Processor) observePending(ctx context.Context) {
	if p.cfg.Observer == nil {
		return
	}
	if n, err := p.store.Pending(ctx); err == nil {
		p.cfg.Observer.Pending(n)
	}
}

// RunOnce leases one pending trigger and collects it; worked is false when
// there was none.
func (p *Processor) RunOnce(ctx context.Context) (worked bool, err error) {
	id, err := p.lease.Claim(ctx)
	if err != nil || id == "" {
		return false, err
	}
	rec, err := p.store.Get(ctx, id)
	if err != nil {
		return true, err
	}
	log := p.cfg.Log.With("trigger_id", id, "account", rec.Trigger.AccountID, "kind", string(rec.Trigger.Kind))
	// Every Stripe request of a triggered collection draws on the shared
	// budget at the charges class (docs/design.md §9: it is a collection).
	// It is detached from ctx: a shutdown lets it finish and be recorded.
	cctx, cancel := context.WithTimeout(stripebudget.WithClass(context.WithoutCancel(ctx), stripebudget.Charges), p.cfg.Timeout)
	res, cerr := p.collector.CollectTriggered(cctx, rec.Trigger.AccountID, rec.Trigger.Kind.Process())
	cancel()
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer wcancel()
	switch {
	case cerr == nil:
		return true, p.finish(wctx, log, rec, res, "")
	case errors.Is(cerr, model.ErrLocked) || errors.Is(cerr, model.ErrConflict) || errors.Is(cerr, lock.ErrNotOwner):
		// Busy (a collection run, a pay now, another trigger of the
		// account): nothing was charged; try again shortly.
		return true, p.later(wctx, id, p.cfg.LockedWait, "")
	case rec.Tries+1 >= p.cfg.MaxTries:
		log.Error("billing trigger: failed too often; given up (the period's own retries go on)", "tries", rec.Tries+1, "error", cerr)
		return true, p.finish(wctx, log, rec, collect.TriggerResult{Outcome: collect.TriggerFailed, Process: rec.Trigger.Kind.Process()}, cerr.Error())
	default:
		wait := p.cfg.Backoff
		for i := 0; i < rec.Tries && wait < 5*time.Minute; i++ {
			wait *= 2
		}
		wait = min(wait, 5*time.Minute)
		log.Warn("billing trigger: collection failed before any charge; tried again later", "tries", rec.Tries+1, "wait", wait, "error", cerr)
		return true, p.later(wctx, id, wait, cerr.Error())
	}
}

// later gives the trigger back, to be leased again after wait.
func (p *Processor) later(ctx context.Context, id string, wait time.Duration, msg string) error {
	var errText any
	if msg != "" {
		errText = truncate(msg, 1000)
	}
	_, err := p.store.pool.Exec(ctx, `UPDATE billing_triggers SET lease_owner = NULL, leased_until = now() + $3::interval,
			tries = tries + 1, error = coalesce($4, error)
		WHERE id = $1 AND lease_owner = $2 AND status = 'running'`, id, p.lease.Owner(), wait.String(), errText)
	if err != nil {
		return fmt.Errorf("trigger %s: give back: %w", id, err)
	}
	return nil
}

// finish records what the trigger did.
func (p *Processor) finish(ctx context.Context, log *slog.Logger, rec Record, res collect.TriggerResult, msg string) error {
	raw, err := json.Marshal(periodsOf(res))
	if err != nil {
		return fmt.Errorf("trigger %s: periods: %w", rec.ID, err)
	}
	var today, errText any
	if !res.Today.IsZero() {
		today = res.Today.String()
	}
	if msg != "" {
		errText = truncate(msg, 1000)
	}
	tag, err := p.store.pool.Exec(ctx, `UPDATE billing_triggers SET status = 'done', outcome = $3, today = $4, attempts = $5,
			periods = $6, error = $7, processed_at = now(), lease_owner = NULL, leased_until = NULL, tries = tries + 1
		WHERE id = $1 AND lease_owner = $2 AND status = 'running'`,
		rec.ID, p.lease.Owner(), res.Outcome, today, res.Attempts, raw, errText)
	if err != nil {
		return fmt.Errorf("trigger %s: record outcome %s: %w", rec.ID, res.Outcome, err)
	}
	if tag.RowsAffected() == 0 {
		// Another replica took the lease over meanwhile (this one was
		// too slow): it collects again and records; what this one
		// charged is on the periods, and their gap stops a second one.
		log.Warn("billing trigger: lease lost before its outcome was recorded", "outcome", res.Outcome)
		return nil
	}
	log.Info("billing trigger collected", "outcome", res.Outcome, "attempts", res.Attempts, "periods", len(res.Periods))
	if p.cfg.Observer != nil {
		p.cfg.Observer.Triggered(string(rec.Trigger.Kind), res.Outcome)
	}
	return nil
}
