package poller

import (
	"context"
	"time"
)

// Every calls run at once and then every interval until ctx ends. Runs
// never overlap: a tick that comes while a run is going is dropped. When ctx
// ends, Every returns after the run in flight has returned (run gets ctx, so
// it stops at its next safe point; replays in flight finish).
func Every(ctx context.Context, interval time.Duration, run func(ctx context.Context)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		run(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
