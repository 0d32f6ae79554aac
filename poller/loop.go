package poller

import (
	"context"
	"time"
)

// Every calls run at once and then every interval until ctx ends. Runs
// never overlap: ticks that come while a run is going collapse into one
// (time.Ticker drops the rest), so a long run is followed by at most one
// immediate run. When ctx ends, Every returns after the run in flight has
// returned (run gets ctx, so it stops at its next safe point; replays in
// flight finish).
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
