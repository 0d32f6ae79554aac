package stripebudget

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Local is one process's budget: a token bucket of rate per second. It
// keeps no queue per priority (one process's callers rarely contend); a 429
// pauses every caller for Retry-After (at least a second).
type Local struct {
	limiter *rate.Limiter
	now     func() time.Time

	mu       sync.Mutex
	pausedTo time.Time
}

// NewLocal returns a budget of perSecond requests per second (burst: a
// tenth of it, at least one).
func NewLocal(perSecond float64) *Local {
	return &Local{limiter: rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond/10))), now: time.Now}
}

// Wait implements Budget.
func (l *Local) Wait(ctx context.Context, _ Priority) error {
	l.mu.Lock()
	until := l.pausedTo
	l.mu.Unlock()
	if d := until.Sub(l.now()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return l.limiter.Wait(ctx)
}

// Throttled implements Budget.
func (l *Local) Throttled(retryAfter time.Duration) {
	if retryAfter < time.Second {
		retryAfter = time.Second
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if to := l.now().Add(retryAfter); to.After(l.pausedTo) {
		l.pausedTo = to
	}
}
