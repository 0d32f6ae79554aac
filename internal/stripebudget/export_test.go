package stripebudget

import (
	"context"
	"sync/atomic"
	"time"
)

// Running reports whether the budget counts a leasing goroutine as running
// (tests: a leaser that died must not stay marked running, or no request
// would ever be served again).
func (b *Shared) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running
}

// StallWakeUps makes every request wake stall(n) later than its slot (n:
// the wake-up's number, from 0): a stalled process, on demand.
func (b *Shared) StallWakeUps(stall func(n int) time.Duration) {
	var n atomic.Int64
	b.wakeAt = func(ctx context.Context, t time.Time) error {
		if err := sleepUntil(ctx, t); err != nil {
			return err
		}
		time.Sleep(stall(int(n.Add(1) - 1)))
		return nil
	}
}
