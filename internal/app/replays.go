package app

import (
	"context"
	"errors"
	"sync"

	"github.com/stripe-payments/stripe-payments/internal/api"
	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/replay"
)

// Bulk replays (docs/design.md §4): the store the API starts them in and
// the runner serve carries them out with, through the one replay path
// (replay.One), its Stripe requests at the shared budget's bulk class.
type Replays struct {
	Store  *replay.Store
	Runner *replay.Runner
}

// newReplays builds the store and runner; the incidents and the outbox
// must exist.
func (a *App) newReplays(r replay.One) *api.Replays {
	store := replay.NewStore(a.Pool, a.Incidents)
	a.Replays = &Replays{Store: store, Runner: replay.NewRunner(store, replay.Outcomes{One: r},
		replay.RunnerConfig{Log: a.log.With("component", "replay"), Redriver: a.outbox, NotDead: func(err error) bool {
			// outbox.Store.Redrive: gone, or no longer a dead letter.
			return errors.Is(err, apperr.ErrConflict) || errors.Is(err, apperr.ErrNotFound)
		}, Finished: a.Metrics.ReplayFinished})}
	return &api.Replays{Service: store, Nudge: a.Replays.Runner.Nudge}
}

// startReplays runs the bulk replay runner until ctx ends (through safego:
// a panic restarts it, and the replay resumes where it was).
func (a *App) startReplays(ctx context.Context, wg *sync.WaitGroup) {
	a.safe.Go(ctx, wg, "bulk_replay", a.Replays.Runner.Run)
}
