// Package stripebudget is the Stripe API budget callers draw on before a
// request (DESIGN §9): one rate, with priorities (charges first, then
// thin-event hydration and purchases, then the poller and bulk work), slowed
// down by Stripe's 429s.
//
// Today it holds Local, one process's own limiter. The shared fleet budget
// (one store all replicas draw on) replaces it behind the same Budget
// interface; callers do not change.
package stripebudget

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Priority orders the callers of the budget (DESIGN §9).
type Priority int

const (
	// Charges: collections and pay now.
	Charges Priority = iota
	// Hydration: thin-event hydration (and purchases).
	Hydration
	// Background: the poller, backfills and bulk replays.
	Background
)

// Budget is what a caller draws on before each Stripe request.
type Budget interface {
	// Wait blocks until one request at priority p may go, or ctx ends.
	Wait(ctx context.Context, p Priority) error
	// Throttled tells the budget Stripe answered 429; retryAfter is its
	// Retry-After (0 when absent). Every caller slows down, not only the
	// one that was refused.
	Throttled(retryAfter time.Duration)
}

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
