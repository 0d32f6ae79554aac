package handler

import (
	"context"
	"sync"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/events"
)

// pending is one delivery waiting for its batch.
type pending struct {
	ev      *stripe.Event
	rec     events.Record
	outcome Outcome
	err     error
	done    chan struct{}
	// unprocessable is set when the preparer found the object unusable
	// (events.ErrUnprocessable): the event is rejected without its appliers.
	unprocessable error
}

// groupCommit batches concurrent deliveries without a background goroutine
// or a linger timer: a delivery that finds fewer than maxFlushers batches in
// flight becomes a flusher and processes what is queued, up to maxBatch at a
// time. Under light load every batch holds one event (no added latency);
// under heavy load deliveries queue while the flushers work, and the next
// batch takes them all.
type groupCommit struct {
	maxBatch    int
	maxFlushers int
	process     func(ctx context.Context, batch []*pending)

	mu       sync.Mutex
	queue    []*pending
	flushing int
}

// submit queues p and waits for its outcome. If ctx ends first the caller
// gets the context error, while p may still be processed (harmlessly: its
// effects apply once, and the sender will deliver it again).
func (g *groupCommit) submit(ctx context.Context, p *pending) (Outcome, error) {
	g.mu.Lock()
	g.queue = append(g.queue, p)
	lead := g.flushing < g.maxFlushers
	if lead {
		g.flushing++
	}
	g.mu.Unlock()
	if lead {
		g.flush(context.WithoutCancel(ctx), p)
	}
	select {
	case <-p.done:
		return p.outcome, p.err
	case <-ctx.Done():
		return Failed, ctx.Err()
	}
}

// flush processes batches until own is done; work still queued then is
// handed to a goroutine, so no delivery waits on a flusher that left.
func (g *groupCommit) flush(ctx context.Context, own *pending) {
	for {
		g.mu.Lock()
		if len(g.queue) == 0 {
			g.flushing--
			g.mu.Unlock()
			return
		}
		if own != nil && isDone(own) {
			g.mu.Unlock()
			go g.flush(ctx, nil)
			return
		}
		n := min(len(g.queue), g.maxBatch)
		batch := make([]*pending, n)
		copy(batch, g.queue)
		g.queue = append(g.queue[:0:0], g.queue[n:]...)
		g.mu.Unlock()
		g.process(ctx, batch)
	}
}

func isDone(p *pending) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// idle reports whether no batch is queued or in flight.
func (g *groupCommit) idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.flushing == 0 && len(g.queue) == 0
}
