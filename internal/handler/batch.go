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
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// processBatch handles a group of deliveries, in four steps:
//
//  1. collapse: the same event may be in a batch several times (concurrent
//     deliveries); the first copy is processed, the others share its fate;
//  2. commitBatch: one Postgres transaction claims the events in the ledger
//     and runs the appliers of those it claimed (on error, each event is
//     retried in a transaction of its own so that one bad event fails
//     alone); at the same time, one strongly consistent BatchGetItem reads
//     the records already there: duplicates and the bookkeeping of earlier
//     attempts;
//  3. settle: each delivery is sorted by what the commit and the read
//     found: a duplicate, a failure, or a record to write as processed;
//  4. record: failures are recorded, beside one BatchWriteItem that records
//     every newly committed event as processed; then each delivery is
//     answered.
//
// A crash between 2 and 4 leaves no processed record; the delivery was not
// acknowledged, so it comes again (Stripe's retry or the poller), finds the
// ledger entry, and only writes the record.
//
// With the write-behind running, 2 also inserts the records of the events it
// claims (Postgres, same transaction), those deliveries are answered on the
// commit and the records handed to the queue; only the rest (claimed
// before, failed, unprocessable) goes through 3 and 4.
func (h *Handler) processBatch(ctx context.Context, batch []*pending) {
	unique, copies := collapse(batch)
	c := h.commitBatch(ctx, unique, copies.finish)
	if len(c.rest) == 0 {
		return
	}
	s := h.settle(c, copies.finish)
	wait := h.recordFailures(ctx, s.failed, copies.finish)
	defer wait()
	h.recordProcessed(ctx, s, copies.finish)
}

// copies are a batch's deliveries by event id.
type copies map[string][]*pending

// collapse returns the first delivery of each event in batch, in order, and
// every delivery by event.
func collapse(batch []*pending) ([]*pending, copies) {
	unique := make([]*pending, 0, len(batch))
	c := copies{}
	for _, p := range batch {
		if _, seen := c[p.rec.ID]; !seen {
			unique = append(unique, p)
		}
		c[p.rec.ID] = append(c[p.rec.ID], p)
	}
	return unique, c
}

// finish answers every delivery of p's event: the first with outcome, the
// others, when it succeeded, as duplicates.
func (c copies) finish(p *pending, outcome stripeevent.Outcome, err error) {
	for i, d := range c[p.rec.ID] {
		d.outcome, d.err = outcome, err
		if i > 0 && err == nil {
			d.outcome = stripeevent.Duplicate
		}
		close(d.done)
	}
}

// committed is what the commit of a batch leaves to settle.
type committed struct {
	rest     []*pending               // deliveries not answered yet
	existing map[string]events.Record // their records already in the table
	readErr  error                    // the read of existing failed
	applied  map[string]bool          // events this batch claimed
	failures map[string]error         // events that failed, or are unprocessable
}

// commitBatch applies the batch's effects once and reads the records
// already there, for the deliveries it does not answer itself.
func (h *Handler) commitBatch(ctx context.Context, unique []*pending, finish func(*pending, stripeevent.Outcome, error)) committed {
	wb := h.writeBehind()
	if wb == nil {
		var c committed
		c.rest = unique
		c.existing, c.applied, c.failures, c.readErr = h.applyReadingBeside(ctx, unique)
		return c
	}
	// Claimed events are answered on the commit; only the others (a
	// redelivery, a failure, an unprocessable object) need the table.
	var c committed
	c.rest, c.applied, c.failures = h.commitRecorded(ctx, wb, unique, finish)
	if len(c.rest) == 0 {
		return c
	}
	ids := make([]string, len(c.rest))
	for i, p := range c.rest {
		ids[i] = p.rec.ID
	}
	start := time.Now()
	c.existing, c.readErr = h.store.BatchGet(ctx, ids)
	h.observeStage(len(ids), "record", start)
	return c
}

// settled is a batch's deliveries sorted for recording.
type settled struct {
	committed
	done       []events.Record // records to write as processed ...
	deliveries []*pending      // ... and their deliveries, in the same order
	failed     []failedRecord
	rejected   map[string]bool
}

// settle answers duplicates and deliveries whose record could not be read,
// and sorts the others into failures and records to write as processed.
func (h *Handler) settle(c committed, finish func(*pending, stripeevent.Outcome, error)) settled {
	s := settled{committed: c, rejected: map[string]bool{}}
	for _, p := range c.rest {
		prev, recorded := c.existing[p.rec.ID]
		failure := c.failures[p.rec.ID]
		switch {
		case c.readErr != nil:
			// Effects may be committed; without the old record the new one
			// cannot be written safely. The redelivery completes it.
			finish(p, stripeevent.Failed, fmt.Errorf("read event record: %w", c.readErr))
			continue
		case recorded && prev.Status == events.StatusProcessed && !c.applied[p.rec.ID]:
			h.logger(p.rec).Debug("duplicate event")
			finish(p, stripeevent.Duplicate, nil)
			continue
		case errors.Is(failure, stripeevent.ErrUnprocessable):
			// Retrying cannot help: record it processed, with no effect.
			s.rejected[p.rec.ID] = true
			p.rec.LastError = failure.Error() // the store bounds its length
		case failure != nil:
			s.failed = append(s.failed, failedRecord{p, failure})
			continue
		}
		if recorded {
			// Keep the first delivery's bookkeeping; count this attempt.
			p.rec = events.Supersede(prev, p.rec)
		}
		p.rec.Status, p.rec.ProcessedAt = events.StatusProcessed, h.now().UTC()
		s.done = append(s.done, p.rec)
		s.deliveries = append(s.deliveries, p)
	}
	return s
}

// recordFailures records the failures all at once, beside the batch's
// write, each caller answered once its record is written (or could not
// be). wait returns when they all are.
func (h *Handler) recordFailures(ctx context.Context, failed []failedRecord, finish func(*pending, stripeevent.Outcome, error)) (wait func()) {
	var recording sync.WaitGroup
	for _, f := range failed {
		recording.Add(1)
		go func() {
			defer recording.Done()
			defer func() {
				// Outside the flusher's recover: a panic here would kill the process.
				if v := recover(); v != nil {
					h.flushPanicked(v, debug.Stack(), 1)
				}
				finish(f.p, stripeevent.Failed, fmt.Errorf("process event: %w", f.cause))
			}()
			h.recordFailure(ctx, f.p.rec, f.cause)
		}()
	}
	return recording.Wait
}

// recordProcessed writes the processed records in one BatchWriteItem and
// answers their deliveries: applied now, completed (applied before), or
// rejected.
func (h *Handler) recordProcessed(ctx context.Context, s settled, finish func(*pending, stripeevent.Outcome, error)) {
	if len(s.done) == 0 {
		return
	}
	if err := h.store.PutProcessed(ctx, s.done); err != nil {
		for _, p := range s.deliveries {
			// The effects are committed; a redelivery finds the ledger
			// entry and only writes the record.
			h.logger(p.rec).Error("could not record processed event", "error", err)
			finish(p, stripeevent.Failed, fmt.Errorf("record processed event: %w", err))
		}
		return
	}
	for _, p := range s.deliveries {
		switch {
		case s.rejected[p.rec.ID]:
			h.logger(p.rec).Error("event rejected: its object cannot be processed; recorded as processed with no effect",
				"error", s.failures[p.rec.ID])
			finish(p, stripeevent.Rejected, nil)
		case s.applied[p.rec.ID]:
			h.logger(p.rec).Info("event processed")
			finish(p, stripeevent.Applied, nil)
		default:
			h.logger(p.rec).Info("event completed; effects were already applied")
			finish(p, stripeevent.Completed, nil)
		}
	}
}

// applyEffects runs the appliers of ev's route, if it has one.
func (h *Handler) applyEffects(ctx context.Context, tx Tx, ev *stripe.Event) error {
	return h.routes[string(ev.Type)].apply(ctx, tx, ev)
}

// hasEffects reports whether events of this type have appliers.
func (h *Handler) hasEffects(eventType string) bool {
	_, ok := h.routes[eventType]
	return ok
}

// applyReadingBeside commits the batch while one strongly consistent
// BatchGetItem reads the records already there (duplicates, and the
// bookkeeping of earlier attempts) beside the transaction.
func (h *Handler) applyReadingBeside(ctx context.Context, unique []*pending) (
	existing map[string]events.Record, applied map[string]bool, failures map[string]error, readErr error) {
	// The read is off the critical path: it runs while Postgres works.
	ids := make([]string, len(unique))
	for i, p := range unique {
		ids[i] = p.rec.ID
	}
	var read sync.WaitGroup
	read.Add(1)
	go func() {
		defer read.Done()
		// A panic here would kill the process: fail the read instead.
		defer func() {
			if v := recover(); v != nil {
				readErr = fmt.Errorf("%w: read event records: %v", ErrPanicked, v)
				h.flushPanicked(v, debug.Stack(), len(ids))
			}
		}()
		existing, readErr = h.store.BatchGet(ctx, ids)
	}()
	todo := make([]*pending, 0, len(unique))
	for _, p := range unique {
		if p.unprocessable == nil {
			todo = append(todo, p)
		}
	}
	start := time.Now()
	applied, failures = h.apply(ctx, todo)
	h.observeStage(len(todo), "commit", start)
	for _, p := range unique {
		if p.unprocessable != nil {
			failures[p.rec.ID] = p.unprocessable
		}
	}
	read.Wait()
	return existing, applied, failures, readErr
}

type failedRecord struct {
	p     *pending
	cause error
}

// apply commits the effects of todo: in one transaction, or event by event
// when the batch fails.
func (h *Handler) apply(ctx context.Context, todo []*pending) (applied map[string]bool, failures map[string]error) {
	byID := make(map[string]*pending, len(todo))
	refs := make([]ledger.EventRef, len(todo))
	for i, p := range todo {
		byID[p.rec.ID] = p
		refs[i] = ledger.EventRef{ID: p.rec.ID, Type: p.rec.Type, StripeAccount: p.rec.StripeAccount, Created: p.rec.Created}
	}
	failures = map[string]error{}
	if len(todo) > 1 {
		applied, err := h.ledger.ApplyBatch(ctx, refs, func(ctx context.Context, tx Tx, ref ledger.EventRef) error {
			return h.applyEffects(ctx, tx, byID[ref.ID].ev)
		})
		if err == nil {
			return applied, failures
		}
		h.log.Warn("batch transaction failed; retrying its events one by one", "events", len(todo), "error", err)
	}
	applied = map[string]bool{}
	for i, p := range todo {
		ok, err := h.ledger.Apply(ctx, refs[i], func(ctx context.Context, tx Tx) error {
			return h.applyEffects(ctx, tx, p.ev)
		})
		if err != nil {
			failures[p.rec.ID] = err
			continue
		}
		applied[p.rec.ID] = ok
	}
	return applied, failures
}

// recordFailureTimeout bounds the bookkeeping write of a failure: it gets
// its own time (the failure may be the deadline itself) but little of it, as
// a dependency that just failed may not answer.
const recordFailureTimeout = 2 * time.Second

// recordFailure leaves the error on the record. Failing to do so is only
// logged: an unrecorded event is re-driven by Stripe's retry or the poller.
func (h *Handler) recordFailure(ctx context.Context, rec events.Record, cause error) {
	log := h.logger(rec)
	log.Error("event processing failed", "error", cause)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordFailureTimeout)
	defer cancel()
	if err := h.store.RecordFailure(ctx, rec, cause); err != nil {
		log.Error("could not record the failure", "error", err)
	}
}
