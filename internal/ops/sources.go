package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/thin"
)

// Checkpoint is the poller's progress on one account.
type Checkpoint struct {
	Account    string
	Checkpoint time.Time
	UpdatedAt  time.Time
	// Age is now minus the checkpoint; Gap the webhooks the poller found
	// missing since this instance started (-1: unknown).
	Age time.Duration
	Gap float64
}

// CheckpointLister lists the poller's stored checkpoints
// (ledger.Checkpoints).
type CheckpointLister interface {
	List(ctx context.Context, limit int) ([]ledger.Saved, error)
}

// maxCheckpoints bounds the checkpoints the overview lists.
const maxCheckpoints = 200

// checkpoints reads the poller's checkpoints and joins this instance's
// webhook-gap counters (the registry holds them; the table does not).
func checkpoints(ctx context.Context, store CheckpointLister, gatherer prometheus.Gatherer, now time.Time) ([]Checkpoint, error) {
	saved, err := store.List(ctx, maxCheckpoints)
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}
	list := make([]Checkpoint, len(saved))
	for i, s := range saved {
		list[i] = Checkpoint{Account: s.Account, Checkpoint: s.Checkpoint, UpdatedAt: s.UpdatedAt, Age: now.Sub(s.Checkpoint), Gap: -1}
	}
	gaps := gathered(gatherer, "stripe_payments_poller_webhook_gap_total", "stripe_account")
	for i := range list {
		if n, ok := gaps[list[i].Account]; ok {
			list[i].Gap = n
		} else if gatherer != nil && len(gaps) > 0 {
			list[i].Gap = 0
		}
	}
	return list, nil
}

// gathered reads a counter or gauge family from the registry by one label.
func gathered(g prometheus.Gatherer, name, label string) map[string]float64 {
	out := map[string]float64{}
	if g == nil {
		return out
	}
	families, err := g.Gather()
	if err != nil {
		return out
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			switch {
			case m.Counter != nil:
				out[key] += m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] += m.Gauge.GetValue()
			}
		}
	}
	return out
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
