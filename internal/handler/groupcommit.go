package handler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// ErrPanicked is the error of every delivery of a batch whose processing
// panicked.
var ErrPanicked = errors.New("batch processing panicked")

// pending is one delivery waiting for its batch.
type pending struct {
	// ctx is the caller's: a delivery whose caller has gone is dropped
	// before processing.
	ctx     context.Context
	ev      *stripe.Event
	rec     events.Record
	outcome stripeevent.Outcome
	err     error
	done    chan struct{}
	// unprocessable is set when the preparer found the object unusable
	// (stripeevent.ErrUnprocessable): the event is rejected without its appliers.
	unprocessable error
	size          int64 // bytes of payload it holds, for the queue bound
}

// groupCommit batches concurrent deliveries without a background goroutine
// or a linger timer: a delivery that finds fewer than maxFlushers batches in
// flight becomes a flusher and processes what is queued, up to maxBatch at a
// time. Under light load every batch holds one event (no added latency);
// under heavy load deliveries queue while the flushers work, and the next
// batch takes them all.
//
// It is bounded: the queue holds at most maxQueue deliveries and maxBytes of
// payload (beyond, submit fails with stripeevent.ErrOverloaded at once); every batch
// runs under batchTimeout; a panic fails its batch only, and the flusher
// goes on.
type groupCommit struct {
	maxBatch     int
	maxFlushers  int
	maxQueue     int           // 0: unbounded
	maxBytes     int64         // 0: unbounded
	batchTimeout time.Duration // 0: none
	process      func(ctx context.Context, batch []*pending)
	// panicked is told about a recovered panic (log and metric); may be nil.
	panicked func(v any, stack []byte, batch int)
	// dropped is told about deliveries whose caller had gone before their
	// batch; may be nil.
	dropped func(n int)

	mu       sync.Mutex
	queue    []*pending
	bytes    int64 // payload bytes in queue
	flushing int
	progress time.Time // when a batch last finished
	// waiting is when the queue last went from empty to not empty: with
	// progress, it dates the oldest wait without a clock read per delivery.
	waiting time.Time
}

// submit queues p and waits for its outcome. If ctx ends first the caller
// gets the context error and p leaves the queue; if its batch had already
// started, p may still be processed (harmlessly: its effects apply once, and
// the sender will deliver it again).
func (g *groupCommit) submit(ctx context.Context, p *pending) (stripeevent.Outcome, error) {
	p.ctx = ctx
	g.mu.Lock()
	if g.full(p.size) {
		g.mu.Unlock()
		return stripeevent.Failed, stripeevent.ErrOverloaded
	}
	if len(g.queue) == 0 {
		g.waiting = time.Now()
	}
	g.queue = append(g.queue, p)
	g.bytes += p.size
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
		if g.withdraw(p) && g.dropped != nil {
			g.dropped(1)
		}
		return stripeevent.Failed, ctx.Err()
	}
}

// full reports whether a delivery of size bytes must be refused. An empty
// queue always takes one, so a single delivery is never refused for its size.
func (g *groupCommit) full(size int64) bool {
	if len(g.queue) == 0 {
		return false
	}
	return (g.maxQueue > 0 && len(g.queue) >= g.maxQueue) || (g.maxBytes > 0 && g.bytes+size > g.maxBytes)
}

// withdraw takes p out of the queue if no batch took it yet, so that a
// caller who gave up frees its place (and its payload) at once. It reports
// whether p was still queued.
func (g *groupCommit) withdraw(p *pending) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.queue {
		if q == p {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			g.bytes -= p.size
			return true
		}
	}
	return false
}

// flush processes batches until own is done; work still queued then is
// handed to a goroutine, so no delivery waits on a flusher that left.
func (g *groupCommit) flush(ctx context.Context, own *pending) {
	ran := false
	for {
		g.mu.Lock()
		if ran {
			g.progress = time.Now()
		}
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
		batch, gone := g.take()
		g.mu.Unlock()
		for _, p := range gone {
			p.outcome, p.err = stripeevent.Failed, fmt.Errorf("dropped before processing: %w", context.Cause(p.ctx))
			close(p.done)
		}
		if len(gone) > 0 && g.dropped != nil {
			g.dropped(len(gone))
		}
		ran = len(batch) > 0
		if ran {
			g.run(ctx, batch)
		}
	}
}

// take removes up to maxBatch deliveries from the head of the queue; those
// whose caller has gone are returned apart, unprocessed. Called with mu held.
func (g *groupCommit) take() (batch, gone []*pending) {
	n := min(len(g.queue), g.maxBatch)
	batch = make([]*pending, 0, n)
	for _, p := range g.queue[:n] {
		g.bytes -= p.size
		if p.ctx != nil && p.ctx.Err() != nil {
			gone = append(gone, p)
			continue
		}
		batch = append(batch, p)
	}
	g.queue = append(g.queue[:0:0], g.queue[n:]...)
	return batch, gone
}

// run processes one batch under the batch deadline. A panic fails the
// deliveries of the batch not yet answered and is reported; the flusher that
// called run carries on, so its slot is never lost.
func (g *groupCommit) run(ctx context.Context, batch []*pending) {
	if g.batchTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.batchTimeout)
		defer cancel()
	}
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		err := fmt.Errorf("%w: %v", ErrPanicked, v)
		for _, p := range batch {
			if !isDone(p) {
				p.outcome, p.err = stripeevent.Failed, err
				close(p.done)
			}
		}
		if g.panicked != nil {
			g.panicked(v, debug.Stack(), len(batch))
		}
	}()
	g.process(ctx, batch)
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

// QueueStats is a snapshot of the ingest queue.
type QueueStats struct {
	Queued   int   // deliveries waiting for a batch
	Bytes    int64 // their payload bytes
	Flushing int   // batches in flight (at most the flusher count)
	// Stalled is how long the oldest queued delivery has waited while no
	// batch finished; zero when nothing waits.
	Stalled time.Duration
}

func (g *groupCommit) stats(now time.Time) QueueStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := QueueStats{Queued: len(g.queue), Bytes: g.bytes, Flushing: g.flushing}
	if len(g.queue) > 0 {
		// Every queued delivery came after waiting; no batch finished
		// since progress. The later of the two bounds the stall.
		since := g.waiting
		if g.progress.After(since) {
			since = g.progress
		}
		s.Stalled = max(0, now.Sub(since))
	}
	return s
}
