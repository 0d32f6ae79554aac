package poller

import (
	"context"
	"log/slog"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
)

// EventStore is the part of the events store the poller reads.
type EventStore interface {
	// BatchGet returns the records of ids (without payloads); absent and
	// expired ones are missing from the map.
	BatchGet(ctx context.Context, ids []string) (map[string]events.Record, error)
	// Get returns one record with its payload.
	Get(ctx context.Context, id string) (events.Record, error)
	// ByDate lists the records created on a UTC date (date/time index).
	ByDate(ctx context.Context, date string, r events.Range, limit int32, cursor string) (events.Page, error)
}

// Checkpoints persists each account's checkpoint: every event created before
// it was listed and found processed or replayed.
type Checkpoints interface {
	Load(ctx context.Context, account string) (at time.Time, ok bool, err error)
	Save(ctx context.Context, account string, at time.Time) error
}

// Locker keeps two checkpointed runs from racing (optional).
type Locker interface {
	TryLock(ctx context.Context) (release func(), ok bool, err error)
}

// AccountSource lists the connected accounts the service knows. Today the
// processed-events ledger (ledger.Accounts); tracked purchases'
// accounts can be added by combining sources (see Accounts).
type AccountSource interface {
	Accounts(ctx context.Context) ([]string, error)
}

// Accounts combines account sources; duplicates are fine.
type Accounts []AccountSource

// Accounts implements AccountSource.
func (s Accounts) Accounts(ctx context.Context) ([]string, error) {
	var all []string
	for _, src := range s {
		ids, err := src.Accounts(ctx)
		if err != nil {
			return nil, err
		}
		all = append(all, ids...)
	}
	return all, nil
}

// Observer receives the metrics of each account's reconciliation.
type Observer interface {
	Listed(account string, n int)
	Replayed(account string, n int)
	Failed(account string, n int)
	// WebhookGap counts events the API listed that the events table never
	// recorded: the webhook never arrived (or was never accepted).
	WebhookGap(account string, n int)
	CheckpointAge(account string, age time.Duration)
	// Accounts names the accounts a run reconciles, before the first.
	Accounts(ids []string)
	// Silent says, after a complete full listing of a checkpointed run,
	// whether the account looks cut off: the listing found events no
	// delivery had recorded and not one recorded from a webhook or
	// EventBridge delivery. (An undelivered listing lists only what was
	// not delivered, so it cannot tell; an account that goes silent is
	// listed in full again by the next run or the one after, as its
	// undelivered rate reaches its full rate.)
	Silent(account string, silent bool)
}

// Deps are the poller's collaborators.
type Deps struct {
	API         *EventsAPI
	Store       EventStore
	Checkpoints Checkpoints
	Accounts    AccountSource
	Replayer    Replayer
	Locker      Locker           // optional
	Observer    Observer         // optional
	Progress    func(p Progress) // optional; called often, from several goroutines
	Log         *slog.Logger     // required
	Now         func() time.Time // optional; time.Now
}
