package handler

import (
	"context"
	"log/slog"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// RecordQueue is the events table's write-behind (package recordq): the
// record of every event a batch claims is inserted into Postgres in the
// batch's transaction, so the delivery is answered on the durable commit and
// the record copied to the events table right after.
type RecordQueue interface {
	// Running reports whether records left to the queue get written; when
	// it does not, the handler writes the records itself before answering.
	Running() bool
	// Admit fails while the events table cannot be written, and waits
	// while the backlog is full.
	Admit(ctx context.Context) error
	// EnqueueClaimed inserts the records of events tx claimed, in tx.
	// Their rows are marked fresh: the queue reads the table before
	// writing them only if a failure or a rejection was recorded for them
	// (the events store marks those, see events.Marker).
	EnqueueClaimed(ctx context.Context, tx Tx, recs []events.Record) error
	// ClaimAndEnqueue claims events that have no effects and inserts their
	// records, in one statement (one round trip, one commit).
	ClaimAndEnqueue(ctx context.Context, refs []ledger.EventRef, recs []events.Record) (map[string]bool, error)
	// Hand gives the writers the records of a committed batch.
	Hand(recs []events.Record)
}

// BatchObserver is told the size and stage times of every batch (metrics).
type BatchObserver interface {
	Batch(events int, stage string, elapsed time.Duration)
}

// WithRecordQueue makes the handler answer on the durable Postgres commit,
// leaving the events-table write to q (when q is running).
func WithRecordQueue(q RecordQueue) Option { return func(h *Handler) { h.records = q } }

// WithBatchObserver sets the batch observer.
func WithBatchObserver(o BatchObserver) Option { return func(h *Handler) { h.batchObs = o } }

// writeBehind is the record queue when records may be left to it.
func (h *Handler) writeBehind() RecordQueue {
	if h.records != nil && h.records.Running() {
		return h.records
	}
	return nil
}

func (h *Handler) observeStage(n int, stage string, since time.Time) {
	if h.batchObs != nil {
		h.batchObs.Batch(n, stage, time.Since(since))
	}
}

// commitRecorded commits the batch with the records of the events it claims
// and answers those deliveries at once (stripeevent.Applied): their effects and records
// are durable, and the events store reads the records from Postgres until
// they are in the table. It returns the deliveries still to settle (claimed
// before, failed, unprocessable) with the batch's claims and failures.
func (h *Handler) commitRecorded(ctx context.Context, wb RecordQueue, unique []*pending, finish func(*pending, stripeevent.Outcome, error)) (
	rest []*pending, applied map[string]bool, failures map[string]error) {
	todo := make([]*pending, 0, len(unique))
	for _, p := range unique {
		if p.unprocessable == nil {
			todo = append(todo, p)
		}
	}
	start := time.Now()
	applied, failures = h.applyRecorded(ctx, wb, todo)
	h.observeStage(len(todo), "commit", start)
	for _, p := range unique {
		if p.unprocessable != nil {
			failures[p.rec.ID] = p.unprocessable
		}
	}
	var handed []events.Record
	var acked []*pending
	for _, p := range unique {
		if applied[p.rec.ID] && failures[p.rec.ID] == nil {
			handed = append(handed, p.rec)
			acked = append(acked, p)
			continue
		}
		rest = append(rest, p)
	}
	wb.Hand(handed)
	info := h.log.Enabled(ctx, slog.LevelInfo)
	for _, p := range acked {
		if info {
			h.logger(p.rec).Info("event processed")
		}
		finish(p, stripeevent.Applied, nil)
	}
	return rest, applied, failures
}

// applyRecorded is apply with the records of the claimed events inserted in
// the same transaction (the one statement of ClaimAndEnqueue when no event
// of the batch has effects). The claimed deliveries' records become the
// processed ones.
func (h *Handler) applyRecorded(ctx context.Context, wb RecordQueue, todo []*pending) (applied map[string]bool, failures map[string]error) {
	failures = map[string]error{}
	if len(todo) == 0 {
		return map[string]bool{}, failures
	}
	now := h.now().UTC()
	refs := make([]ledger.EventRef, len(todo))
	recs := make([]events.Record, len(todo))
	byID := make(map[string]int, len(todo))
	effects := false
	for i, p := range todo {
		refs[i] = ledger.EventRef{ID: p.rec.ID, Type: p.rec.Type, StripeAccount: p.rec.StripeAccount, Created: p.rec.Created}
		recs[i] = p.rec
		recs[i].Status, recs[i].ProcessedAt = events.StatusProcessed, now
		byID[p.rec.ID] = i
		if h.hasEffects(p.rec.Type) {
			effects = true
		}
	}
	adopt := func(claimed map[string]bool) {
		for id, ok := range claimed {
			if ok {
				todo[byID[id]].rec = recs[byID[id]]
			}
		}
	}
	pick := func(ids []string) []events.Record {
		out := make([]events.Record, len(ids))
		for i, id := range ids {
			out[i] = recs[byID[id]]
		}
		return out
	}
	if effects && len(todo) == 1 {
		return h.applyRecordedOneByOne(ctx, wb, todo, refs, recs, effects, adopt, failures), failures
	}
	var err error
	if !effects {
		applied, err = wb.ClaimAndEnqueue(ctx, refs, recs)
	} else {
		applied, err = h.ledger.ApplyBatchThen(ctx, refs,
			func(ctx context.Context, tx Tx, ref ledger.EventRef) error {
				return h.applyEffects(ctx, tx, todo[byID[ref.ID]].ev)
			},
			func(ctx context.Context, tx Tx, claimed []string) error {
				return wb.EnqueueClaimed(ctx, tx, pick(claimed))
			})
	}
	if err == nil {
		adopt(applied)
		return applied, failures
	}
	if len(todo) == 1 {
		failures[todo[0].rec.ID] = err
		return map[string]bool{}, failures
	}
	h.log.Warn("batch transaction failed; retrying its events one by one", "events", len(todo), "error", err)
	return h.applyRecordedOneByOne(ctx, wb, todo, refs, recs, effects, adopt, failures), failures
}

// applyRecordedOneByOne commits each event of todo in a transaction of its
// own, so that a bad event fails alone; failures are added to failures.
func (h *Handler) applyRecordedOneByOne(ctx context.Context, wb RecordQueue, todo []*pending, refs []ledger.EventRef,
	recs []events.Record, effects bool, adopt func(map[string]bool), failures map[string]error) map[string]bool {
	applied := map[string]bool{}
	for i, p := range todo {
		var ok bool
		var err error
		if !effects {
			var claimed map[string]bool
			claimed, err = wb.ClaimAndEnqueue(ctx, refs[i:i+1], recs[i:i+1])
			ok = claimed[p.rec.ID]
		} else {
			ok, err = h.ledger.Apply(ctx, refs[i], func(ctx context.Context, tx Tx) error {
				if err := h.applyEffects(ctx, tx, p.ev); err != nil {
					return err
				}
				return wb.EnqueueClaimed(ctx, tx, recs[i:i+1])
			})
		}
		if err != nil {
			failures[p.rec.ID] = err
			continue
		}
		applied[p.rec.ID] = ok
	}
	adopt(applied)
	return applied
}
