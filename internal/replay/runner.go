package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/stripe-payments/stripe-payments/internal/lease"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
)

// Replayer re-drives one event exactly as POST
// /internal/v1/events/{id}/replay does and returns the handler's outcome.
type Replayer interface {
	Replay(ctx context.Context, id, account string) (outcome string, err error)
}

// Redriver re-drives an outbox dead letter (outbox.Store): ErrNotDead-like
// errors are told apart by NotDead.
type Redriver interface {
	Redrive(ctx context.Context, id uuid.UUID) error
}

// RunnerConfig tunes a Runner.
type RunnerConfig struct {
	// Lease is how long a runner holds a replay without recording progress
	// before another (after a restart, another replica) takes it over
	// (0: 30 s).
	Lease time.Duration
	// Poll is how often an idle runner looks for work (0: 2 s); Nudge
	// wakes it at once.
	Poll time.Duration
	Log  *slog.Logger
	// Redriver re-drives the dead letters of a delivery incident (nil: such
	// items fail); NotDead says an error means the message is no longer a
	// dead letter (delivered or pending since: nothing to do).
	Redriver Redriver
	NotDead  func(error) bool
	// Finished is told how each replay this runner carried to its end
	// finished: "clean", or "with_failures" when items failed again (a
	// run that is done yet left work behind; nil: not told).
	Finished func(result string)
}

// Runner carries out running replays, one item at a time; their Stripe
// requests draw on the shared budget at the bulk (Background) class.
// Claiming, the lease and the loop are package lease's.
type Runner struct {
	store    *Store
	replayer Replayer
	cfg      RunnerConfig
	lease    *lease.Runner
}

// NewRunner returns a Runner.
func NewRunner(store *Store, replayer Replayer, cfg RunnerConfig) *Runner {
	l := lease.New(store.pool, lease.Config{Table: "replays", What: "replay", Name: "bulk replay",
		Lease: cfg.Lease, Poll: cfg.Poll, Log: cfg.Log})
	return &Runner{store: store, replayer: replayer, cfg: cfg, lease: l}
}

// Nudge wakes the runner: a replay was started.
func (r *Runner) Nudge() { r.lease.Nudge() }

// Run works until ctx ends.
func (r *Runner) Run(ctx context.Context) { r.lease.Run(ctx, r.RunOnce, nil) }

// RunOnce claims one running replay nobody holds and carries it out to its
// end (or until ctx ends or the lease is lost). worked is false when there
// was none.
func (r *Runner) RunOnce(ctx context.Context) (worked bool, err error) {
	id, err := r.lease.Claim(ctx)
	if err != nil || id == "" {
		return false, err
	}
	for {
		items, err := r.pending(ctx, id, 100)
		if err != nil {
			return true, err
		}
		if len(items) == 0 {
			return true, r.finish(ctx, id)
		}
		for _, it := range items {
			// Every Stripe request the re-drive makes (a fetch of an event
			// the table no longer holds, an applier's lookups) draws on the
			// shared budget at the bulk class (docs/design.md §9).
			outcome, rerr := r.redrive(stripebudget.WithClass(ctx, stripebudget.Background), it)
			if ctx.Err() != nil {
				// Stopping: the item is left unrecorded and re-driven after
				// the restart (the ledger makes that a duplicate if it applied).
				return true, ctx.Err()
			}
			msg := ""
			if rerr != nil {
				outcome, msg = "failed", rerr.Error()
				if len(msg) > 1000 {
					msg = msg[:1000]
				}
			}
			held, err := r.record(ctx, id, it.seq, outcome, msg)
			if err != nil {
				return true, err
			}
			if !held {
				// Cancelled (the item in hand stays unrecorded: a later
				// replay finds it processed, or re-drives it, the ledger
				// answering duplicate), or taken over by another runner.
				if cancelled, err := r.cancelled(ctx, id); err != nil || cancelled {
					return true, err
				}
				return true, fmt.Errorf("replay %s: lease lost to another runner", id)
			}
		}
	}
}

type pendingItem struct {
	seq                    int
	kind, eventID, account string
}

// redrive carries out one item: an event through the replay path, a dead
// letter through the outbox's re-drive (redriven, or not_dead when it was
// delivered or re-driven since).
func (r *Runner) redrive(ctx context.Context, it pendingItem) (string, error) {
	if it.kind != "delivery" {
		return r.replayer.Replay(ctx, it.eventID, it.account)
	}
	if r.cfg.Redriver == nil {
		return "", errors.New("no outbox to re-drive dead letters through")
	}
	id, err := uuid.Parse(it.eventID)
	if err != nil {
		return "", fmt.Errorf("dead letter id %q: %w", it.eventID, err)
	}
	err = r.cfg.Redriver.Redrive(ctx, id)
	switch {
	case err == nil:
		return "redriven", nil
	case r.cfg.NotDead != nil && r.cfg.NotDead(err):
		return "not_dead", nil
	}
	return "", err
}

func (r *Runner) pending(ctx context.Context, id string, n int) ([]pendingItem, error) {
	rows, err := r.store.pool.Query(ctx, `SELECT seq, kind, event_id, stripe_account FROM replay_items
		WHERE replay_id = $1 AND outcome IS NULL ORDER BY seq LIMIT $2`, id, n)
	if err != nil {
		return nil, fmt.Errorf("replay %s: pending items: %w", id, err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (pendingItem, error) {
		var p pendingItem
		err := row.Scan(&p.seq, &p.kind, &p.eventID, &p.account)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("replay %s: pending items: %w", id, err)
	}
	return items, nil
}

// record writes an item's outcome and the counters in one transaction,
// and renews the lease; held is false when another runner holds it now.
func (r *Runner) record(ctx context.Context, id string, seq int, outcome, msg string) (held bool, err error) {
	applied, failed := 0, 0
	switch outcome {
	case "applied", "completed", "redriven":
		applied = 1
	case "failed", "rejected":
		failed = 1
	}
	err = pgx.BeginFunc(ctx, r.store.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE replays SET done = done + 1, applied = applied + $3, failed = failed + $4,
				leased_until = now() + $5::interval
			WHERE id = $1 AND lease_owner = $2 AND status = 'running'`, id, r.lease.Owner(), applied, failed, r.lease.Interval())
		if err != nil {
			return fmt.Errorf("replay %s: record progress: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		var errText any
		if msg != "" {
			errText = msg
		}
		tag, err = tx.Exec(ctx, `UPDATE replay_items SET outcome = $3, error = $4 WHERE replay_id = $1 AND seq = $2 AND outcome IS NULL`,
			id, seq, outcome, errText)
		if err != nil {
			return fmt.Errorf("replay %s: record item %d: %w", id, seq, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("replay %s: item %d recorded twice", id, seq)
		}
		held = true
		return nil
	})
	return held, err
}

func (r *Runner) finish(ctx context.Context, id string) error {
	var failed int
	err := r.store.pool.QueryRow(ctx, `UPDATE replays SET status = 'done', finished_at = now(), lease_owner = NULL, leased_until = NULL
		WHERE id = $1 AND lease_owner = $2 AND status = 'running' RETURNING failed`, id, r.lease.Owner()).Scan(&failed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // cancelled, or taken over
	}
	if err != nil {
		return fmt.Errorf("replay %s: finish: %w", id, err)
	}
	if r.cfg.Finished != nil {
		result := "clean"
		if failed > 0 {
			result = "with_failures"
		}
		r.cfg.Finished(result)
	}
	return nil
}

// cancelled reports whether replay id was cancelled.
func (r *Runner) cancelled(ctx context.Context, id string) (bool, error) {
	var status string
	if err := r.store.pool.QueryRow(ctx, `SELECT status FROM replays WHERE id = $1`, id).Scan(&status); err != nil {
		return false, fmt.Errorf("replay %s: read status: %w", id, err)
	}
	return status == StatusCancelled, nil
}
