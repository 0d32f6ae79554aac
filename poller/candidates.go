package poller

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Reason says why an event is replayed.
type Reason string

// Reasons.
const (
	ReasonMissing   Reason = "missing"    // not in the events table (a webhook gap)
	ReasonReceived  Reason = "received"   // recorded, never processed
	ReasonFailed    Reason = "failed"     // recorded, processing failed
	ReasonNoPayload Reason = "no_payload" // stuck, but the record has no payload
)

// Candidate is an event to replay.
type Candidate struct {
	ID      string
	Type    string
	Account string
	Created time.Time
	Reason  Reason
	Payload []byte `json:"-"`
}

func candidate(a account, ev Listed, reason Reason) Candidate {
	payload := ev.Raw
	if a.connected && ev.Account == "" {
		// The payload is what gets recorded: make sure the record gets the
		// connected account, not the platform's.
		payload = withAccount(payload, a.id)
	}
	return Candidate{ID: ev.ID, Type: ev.Type, Account: a.id, Created: time.Unix(ev.Created, 0).UTC(), Reason: reason, Payload: payload}
}

// replayAll replays todo (oldest first) with bounded concurrency and returns
// the length of the fully handled prefix: the index of the first event that
// failed or was not attempted because ctx ended.
func (p *Poller) replayAll(ctx context.Context, todo []Candidate, c *Counts) int {
	if len(todo) == 0 {
		return 0
	}
	handled := make([]bool, len(todo))
	jobs := make(chan int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range min(p.cfg.Concurrency, len(todo)) {
		wg.Go(func() {
			for i := range jobs {
				handled[i] = p.replayOne(ctx, todo[i], c, &mu, len(todo))
			}
		})
	}
dispatch:
	for i := range todo {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(jobs)
	wg.Wait()
	for i, ok := range handled {
		if !ok {
			return i
		}
	}
	return len(todo)
}

// replayOne replays one event, retrying transient failures. In-flight
// replays finish even when ctx ends (shutdown waits for them); only the
// retries stop.
func (p *Poller) replayOne(ctx context.Context, c Candidate, counts *Counts, mu *sync.Mutex, total int) bool {
	log := p.log.With("event_id", c.ID, "event_type", c.Type, "stripe_account", c.Account, "reason", string(c.Reason))
	var (
		outcome stripeevent.Outcome
		err     error
	)
	for attempt := 0; attempt < p.cfg.ReplayAttempts; attempt++ {
		if attempt > 0 {
			if sleep(ctx, p.cfg.RetryBackoff<<(attempt-1)) != nil {
				break
			}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.ReplayTimeout)
		outcome, err = p.d.Replayer.Replay(rctx, c.ID, c.Payload)
		cancel()
		if err == nil || errors.Is(err, ErrPermanent) {
			break
		}
		log.Warn("replay attempt failed", "attempt", attempt+1, "error", err)
	}
	mu.Lock()
	defer func() {
		p.progress(c.Account, counts, total)
		mu.Unlock()
	}()
	switch {
	case err != nil:
		counts.Failed++
		log.Error("replay failed; the checkpoint holds before this event", "error", err, "created", c.Created)
		return false
	case outcome == stripeevent.Duplicate:
		// Processed meanwhile (a concurrent webhook delivery).
		counts.AlreadyProcessed++
		return true
	case outcome == stripeevent.Ignored:
		counts.Ignored++
		log.Warn("replayed event was ignored (livemode differs from the API key's mode)")
		return true
	default:
		counts.Replayed++
		log.Info("event replayed", "outcome", string(outcome), "created", c.Created)
		return true
	}
}

func (p *Poller) progress(account string, c *Counts, pending int) {
	if p.d.Progress == nil {
		return
	}
	p.d.Progress(Progress{Account: account, Counts: *c, ToReplay: pending})
}
