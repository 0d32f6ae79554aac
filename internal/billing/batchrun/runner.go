package batchrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stripe-payments/stripe-payments/internal/billing/collect"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/lease"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
)

// Charger charges one batch item (collect.Collector.BatchCharge).
type Charger interface {
	BatchCharge(ctx context.Context, account, subID string, want dates.Date, prev *collect.BatchAttempt,
		begin func(collect.BatchAttempt) error) (collect.BatchResult, error)
}

// Observer counts batch progress (metrics.Batches).
type Observer interface {
	BatchItem(outcome string)
	BatchesRunning(n int)
}

// OutcomeFailed: the item's charge returned an error. When the attempt was
// claimed its outcome is unknown: the period stays in flight and the
// collection job resolves it (docs/design.md §8), never the batch with a new key.
const OutcomeFailed = "failed"

// OutcomeSkippedLocked: the account's lock stayed held (a collection run,
// a pay now) through every try.
const OutcomeSkippedLocked = "skipped_locked"

// RunnerConfig tunes a Runner.
type RunnerConfig struct {
	// Lease is how long a runner holds a batch without recording progress
	// before another (after a restart, another replica) takes it over
	// (0: 30 s).
	Lease time.Duration
	// Poll is how often an idle runner looks for work (0: 2 s).
	Poll time.Duration
	// BusyTries and BusyWait: an item whose account is locked, or whose
	// subscription changed under the claim, is tried again BusyTries times
	// (0: 5), BusyWait apart (0: 2 s), then reported skipped_locked.
	BusyTries int
	BusyWait  time.Duration
	Log       *slog.Logger
	Observer  Observer
}

// Runner carries out running batches, one item at a time, its Stripe
// requests at the charges class of the shared budget (docs/design.md §9: a batch
// is a collection). Claiming, the lease and the loop are package lease's.
type Runner struct {
	store   *Store
	charger Charger
	cfg     RunnerConfig
	lease   *lease.Runner
}

// NewRunner returns a Runner.
func NewRunner(store *Store, charger Charger, cfg RunnerConfig) *Runner {
	if cfg.BusyTries <= 0 {
		cfg.BusyTries = 5
	}
	if cfg.BusyWait <= 0 {
		cfg.BusyWait = 2 * time.Second
	}
	l := lease.New(store.pool, lease.Config{Table: "billing_batches", What: "batch", Name: "batch collection",
		Lease: cfg.Lease, Poll: cfg.Poll, Log: cfg.Log})
	return &Runner{store: store, charger: charger, cfg: cfg, lease: l}
}

// Nudge wakes the runner: a batch was started.
func (r *Runner) Nudge() { r.lease.Nudge() }

// Run works until ctx ends.
func (r *Runner) Run(ctx context.Context) { r.lease.Run(ctx, r.RunOnce, r.observeRunning) }

func (r *Runner) observeRunning(ctx context.Context) {
	if r.cfg.Observer == nil {
		return
	}
	if n, err := r.store.Running(ctx); err == nil {
		r.cfg.Observer.BatchesRunning(n)
	}
}

type pendingItem struct {
	seq          int
	account, sub string
	billingDate  string
	begun        *collect.BatchAttempt
}

// RunOnce claims one running batch nobody holds and carries it out to its
// end (or until ctx ends or the lease is lost). worked is false when there
// was none.
func (r *Runner) RunOnce(ctx context.Context) (worked bool, err error) {
	id, err := r.lease.Claim(ctx)
	if err != nil || id == "" {
		return false, err
	}
	r.observeRunning(ctx)
	for {
		items, err := r.pending(ctx, id, 100)
		if err != nil {
			return true, err
		}
		if len(items) == 0 {
			err := r.finish(ctx, id)
			r.observeRunning(ctx)
			return true, err
		}
		for _, it := range items {
			res, cerr := r.chargeItem(ctx, id, it)
			if ctx.Err() != nil {
				// Stopping: the item stays without an outcome; the resume
				// settles a begun attempt with its own key.
				return true, ctx.Err()
			}
			outcome, msg := res.Outcome, ""
			if cerr != nil {
				if errors.Is(cerr, errLeaseLost) {
					return true, cerr
				}
				outcome, msg = OutcomeFailed, cerr.Error()
				if errors.Is(cerr, model.ErrLocked) || errors.Is(cerr, model.ErrConflict) {
					outcome = OutcomeSkippedLocked
				}
				if len(msg) > 1000 {
					msg = msg[:1000]
				}
			}
			held, err := r.record(ctx, id, it.seq, outcome, res, msg)
			if err != nil {
				return true, err
			}
			if !held {
				return true, fmt.Errorf("batch %s: %w", id, errLeaseLost)
			}
			if r.cfg.Observer != nil {
				r.cfg.Observer.BatchItem(outcome)
			}
		}
	}
}

var errLeaseLost = errors.New("lease lost to another runner")

// chargeItem charges one item, trying again while its account is busy.
func (r *Runner) chargeItem(ctx context.Context, id string, it pendingItem) (collect.BatchResult, error) {
	want, err := dates.Parse(it.billingDate)
	if err != nil {
		return collect.BatchResult{}, fmt.Errorf("item %d: billing date: %w", it.seq, err)
	}
	// Every Stripe request of the charge draws on the shared budget at the
	// charges class: a batch collection is a collection (docs/design.md §9).
	cctx := stripebudget.WithClass(ctx, stripebudget.Charges)
	prev := it.begun
	for try := 1; ; try++ {
		res, err := r.charger.BatchCharge(cctx, it.account, it.sub, want, prev, func(a collect.BatchAttempt) error {
			if err := r.begin(ctx, id, it.seq, a); err != nil {
				return err
			}
			prev = &a
			return nil
		})
		// Busy: nothing was sent. The account's lock lost before the
		// charge (lock.ErrNotOwner) leaves the claim in flight, unsent: the
		// next try settles it with its own key (prev).
		busy := errors.Is(err, model.ErrLocked) || errors.Is(err, model.ErrConflict) || errors.Is(err, lock.ErrNotOwner)
		if !busy || try >= r.cfg.BusyTries {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(r.cfg.BusyWait):
		}
		if held, err := r.lease.Renew(ctx, r.store.pool, id); err != nil || !held {
			if err == nil {
				err = errLeaseLost
			}
			return res, err
		}
	}
}

func (r *Runner) pending(ctx context.Context, id string, n int) ([]pendingItem, error) {
	rows, err := r.store.pool.Query(ctx, `SELECT seq, account_id, subscription_id, billing_date, begun_date, begun_attempt
		FROM billing_batch_items WHERE batch_id = $1 AND outcome IS NULL ORDER BY seq LIMIT $2`, id, n)
	if err != nil {
		return nil, fmt.Errorf("batch %s: pending items: %w", id, err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (pendingItem, error) {
		var (
			p         pendingItem
			begunDate *string
			begunNo   *int
		)
		if err := row.Scan(&p.seq, &p.account, &p.sub, &p.billingDate, &begunDate, &begunNo); err != nil {
			return p, err
		}
		if begunDate != nil && begunNo != nil {
			d, err := dates.Parse(*begunDate)
			if err != nil {
				return p, fmt.Errorf("item %d: begun date: %w", p.seq, err)
			}
			p.begun = &collect.BatchAttempt{BillingDate: d, AttemptNo: *begunNo}
		}
		return p, nil
	})
	if err != nil {
		return nil, fmt.Errorf("batch %s: pending items: %w", id, err)
	}
	return items, nil
}

// begin records, before the claim, the attempt an item is about to make;
// it fails (and nothing is charged) when the lease is lost.
func (r *Runner) begin(ctx context.Context, id string, seq int, a collect.BatchAttempt) error {
	return pgx.BeginFunc(ctx, r.store.pool, func(tx pgx.Tx) error {
		held, err := r.lease.Renew(ctx, tx, id)
		if err != nil {
			return err
		}
		if !held {
			return errLeaseLost
		}
		if _, err := tx.Exec(ctx, `UPDATE billing_batch_items SET begun_date = $3, begun_attempt = $4
			WHERE batch_id = $1 AND seq = $2 AND outcome IS NULL`, id, seq, a.BillingDate.String(), a.AttemptNo); err != nil {
			return fmt.Errorf("batch %s: record item %d begun: %w", id, seq, err)
		}
		return nil
	})
}

// record writes an item's outcome and the counters in one transaction and
// renews the lease; held is false when another runner holds it now.
func (r *Runner) record(ctx context.Context, id string, seq int, outcome string, res collect.BatchResult, msg string) (held bool, err error) {
	var paid, processing, declined, skipped, failed int
	switch outcome {
	case collect.BatchPaid:
		paid = 1
	case collect.BatchProcessing:
		processing = 1
	case collect.BatchDeclined:
		declined = 1
	case OutcomeFailed:
		failed = 1
	default: // nothing_to_pay, skipped_*
		skipped = 1
	}
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	err = pgx.BeginFunc(ctx, r.store.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE billing_batches SET done = done + 1, paid = paid + $3, processing = processing + $4,
				declined = declined + $5, skipped = skipped + $6, failed = failed + $7, leased_until = now() + $8::interval
			WHERE id = $1 AND lease_owner = $2 AND status = 'running'`,
			id, r.lease.Owner(), paid, processing, declined, skipped, failed, r.lease.Interval())
		if err != nil {
			return fmt.Errorf("batch %s: record progress: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		tag, err = tx.Exec(ctx, `UPDATE billing_batch_items SET outcome = $3, payment_intent = $4, decline_code = $5, error = $6
			WHERE batch_id = $1 AND seq = $2 AND outcome IS NULL`,
			id, seq, outcome, nullable(res.PaymentIntent), nullable(res.DeclineCode), nullable(msg))
		if err != nil {
			return fmt.Errorf("batch %s: record item %d: %w", id, seq, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("batch %s: item %d recorded twice", id, seq)
		}
		held = true
		return nil
	})
	return held, err
}

func (r *Runner) finish(ctx context.Context, id string) error {
	if _, err := r.store.pool.Exec(ctx, `UPDATE billing_batches SET status = 'done', finished_at = now(), lease_owner = NULL, leased_until = NULL
		WHERE id = $1 AND lease_owner = $2`, id, r.lease.Owner()); err != nil {
		return fmt.Errorf("batch %s: finish: %w", id, err)
	}
	return nil
}
