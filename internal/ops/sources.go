package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/thin"
)

// Checkpoint is the poller's progress on one account.
type Checkpoint struct {
	Account    string
	Checkpoint time.Time
	UpdatedAt  time.Time
	// Age is now minus the checkpoint; Gap the webhooks the poller found
	// missing since this instance started (-1: unknown); Silent that its
	// last full listing found a gap and no event delivered by webhook or
	// EventBridge (the StripePaymentsAccountSilent alert's accounts).
	Age    time.Duration
	Gap    int
	Silent bool
}

// CheckpointLister lists the poller's stored checkpoints
// (ledger.Checkpoints).
type CheckpointLister interface {
	List(ctx context.Context, limit int) ([]ledger.Saved, error)
}

// PollerFigures is what this instance's poller found per account
// (metrics.Poller): the per-account figures the metrics do not label.
type PollerFigures interface {
	Account(account string) (metrics.PollerAccount, bool)
}

// maxCheckpoints bounds the checkpoints the overview lists.
const maxCheckpoints = 200

// checkpoints reads the poller's checkpoints and joins this instance's
// poller figures (memory holds them; the table does not).
func checkpoints(ctx context.Context, store CheckpointLister, figures PollerFigures, now time.Time) ([]Checkpoint, error) {
	saved, err := store.List(ctx, maxCheckpoints)
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}
	list := make([]Checkpoint, len(saved))
	for i, s := range saved {
		list[i] = Checkpoint{Account: s.Account, Checkpoint: s.Checkpoint, UpdatedAt: s.UpdatedAt, Age: now.Sub(s.Checkpoint), Gap: -1}
		if figures == nil {
			continue
		}
		if f, ok := figures.Account(s.Account); ok {
			list[i].Gap, list[i].Silent = f.WebhookGap, f.Silent
		}
	}
	return list, nil
}

// OutboxReader is what the console reads of the outbox (outbox.Store).
type OutboxReader interface {
	Stats(ctx context.Context) ([]outbox.TopicStats, error)
	ListDead(ctx context.Context, topic string, after outbox.DeadCursor, limit int) ([]outbox.DeadLetter, *outbox.DeadCursor, error)
	ListPending(ctx context.Context, topic string, after outbox.PendingCursor, limit int) ([]outbox.Undelivered, *outbox.PendingCursor, error)
	// Redrive makes a dead letter due again (apperr.ErrNotFound, or
	// apperr.ErrConflict for one that is not dead, when there is nothing to do).
	Redrive(ctx context.Context, id uuid.UUID) error
}

// MaxThinStuck bounds the failing thin events listed.
const MaxThinStuck = 20

// ThinReader reads the thin events waiting for hydration (thin.Queue).
type ThinReader interface {
	Hydrations(ctx context.Context, now time.Time, maxStuck int) (thin.Hydrations, error)
}

// QuarantineCounter counts the event records the events table refused for
// good (recordq.Queue); the overview warns while there are any.
type QuarantineCounter interface {
	Quarantined(ctx context.Context) (int64, error)
}
