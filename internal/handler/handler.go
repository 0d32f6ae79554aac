// Package handler is the one event handler shared by the webhook, the poller
// and replays. Every event is applied at most once to Postgres (a
// processed-events ledger claimed in the transaction of its effects) and
// recorded in DynamoDB as processed only after that transaction committed.
//
// Concurrent deliveries are group-committed (see groupcommit.go): a batch of
// events costs one Postgres transaction, one BatchGetItem beside it, and one
// BatchWriteItem, instead of three round trips per event. With a record
// queue (writebehind.go) the batch's transaction also holds the events'
// processed records, the deliveries are answered on its durable commit, and
// the records reach DynamoDB right behind the answer.
package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// EventStore is the part of the events store the handler uses.
type EventStore interface {
	// BatchGet reads existing records, strongly consistent, expired ones absent.
	BatchGet(ctx context.Context, ids []string) (map[string]events.Record, error)
	// PutProcessed writes records whose effects are committed.
	PutProcessed(ctx context.Context, recs []events.Record) error
	// RecordFailure leaves a failed (never a processed) record behind.
	RecordFailure(ctx context.Context, r events.Record, cause error) error
}

// Ledger applies events' effects at most once.
type Ledger interface {
	Apply(ctx context.Context, ev tracking.EventRef, effects func(ctx context.Context, tx pgx.Tx) error) (bool, error)
	ApplyBatch(ctx context.Context, refs []tracking.EventRef, effects func(ctx context.Context, tx pgx.Tx, ev tracking.EventRef) error) (map[string]bool, error)
	// ApplyBatchThen is ApplyBatch with a last step, in the transaction,
	// given the ids newly claimed.
	ApplyBatchThen(ctx context.Context, refs []tracking.EventRef, effects func(ctx context.Context, tx pgx.Tx, ev tracking.EventRef) error,
		then func(ctx context.Context, tx pgx.Tx, claimed []string) error) (map[string]bool, error)
}

// Applier applies one event type's state transitions inside the ledger's
// transaction. It must only write through tx, and must not call slow
// external services: the transaction may hold a whole batch of events.
type Applier func(ctx context.Context, tx pgx.Tx, ev *stripe.Event) error

// Preparer runs before the ledger transaction opens, for work that must not
// hold a database transaction open, such as asking Stripe for what the
// payload lacks. It may enrich ev (e.g. expand a reference in ev.Data) for the
// appliers. It runs again on every delivery that reaches processing, so it must
// be side-effect free; an error fails the delivery, which is retried.
type Preparer func(ctx context.Context, ev *stripe.Event) error

// Observer is told the outcome of every Handle call (metrics).
type Observer interface {
	Handled(eventType string, outcome stripeevent.Outcome, elapsed time.Duration)
}

// IngestObserver is told about the ingest path's protections at work
// (metrics); see WithIngestObserver.
type IngestObserver interface {
	// FlushPanicked: a batch's processing panicked; its deliveries failed.
	FlushPanicked()
	// Shed: deliveries refused or dropped without processing, by reason
	// (ShedQueueFull, ShedCallerGone).
	Shed(reason string, n int)
}

// Reasons of IngestObserver.Shed.
const (
	ShedQueueFull  = "queue_full"
	ShedCallerGone = "caller_gone"
)

// Config of the handler.
type Config struct {
	PlatformAccount string
	EventTTL        time.Duration
	Livemode        bool
	// MaxBatch bounds a group commit (default 25, DynamoDB's BatchWriteItem
	// limit); 1 processes every event on its own.
	MaxBatch int
	// Flushers is how many batches may be in flight at once (default 4), so
	// that one batch's Postgres work overlaps another's DynamoDB write.
	Flushers int
	// DeliveryTimeout bounds one Handle call: preparer, wait in the queue
	// and batch (default 10 s). Past it the caller gets an error (5xx).
	DeliveryTimeout time.Duration
	// BatchTimeout bounds one batch's Postgres and DynamoDB work
	// (default 5 s), so a dependency that stops answering frees the flusher.
	BatchTimeout time.Duration
	// QueueMax and QueueMaxBytes bound the deliveries waiting for a batch
	// and their payload (defaults 1000 and 64 MiB); beyond, Handle fails at
	// once with stripeevent.ErrOverloaded.
	QueueMax      int
	QueueMaxBytes int64
	// StuckAfter: Ready fails once the oldest queued delivery has waited
	// this long with no batch finishing (default 3 × BatchTimeout).
	StuckAfter time.Duration
}

// Handler is the one event handler.
type Handler struct {
	cfg       Config
	store     EventStore
	ledger    Ledger
	appliers  map[string]Applier
	prepare   map[string]Preparer
	observer  Observer
	ingestObs IngestObserver
	log       *slog.Logger
	now       func() time.Time
	group     *groupCommit
	records   RecordQueue   // the events table's write-behind; nil: none
	batchObs  BatchObserver // may be nil
}

// Option customises a Handler.
type Option func(*Handler)

// WithApplier registers the applier for an event type; later registrations of
// the same type run after earlier ones, in the same transaction.
func WithApplier(eventType string, a Applier) Option {
	return func(h *Handler) {
		if prev, ok := h.appliers[eventType]; ok {
			h.appliers[eventType] = func(ctx context.Context, tx pgx.Tx, ev *stripe.Event) error {
				if err := prev(ctx, tx, ev); err != nil {
					return err
				}
				return a(ctx, tx, ev)
			}
			return
		}
		h.appliers[eventType] = a
	}
}

// WithPreparer registers the preparer of an event type (one per type; a later
// registration replaces an earlier one).
func WithPreparer(eventType string, p Preparer) Option {
	return func(h *Handler) { h.prepare[eventType] = p }
}

// WithObserver sets the outcome observer.
func WithObserver(o Observer) Option { return func(h *Handler) { h.observer = o } }

// WithIngestObserver sets the observer of panics and shed deliveries.
func WithIngestObserver(o IngestObserver) Option { return func(h *Handler) { h.ingestObs = o } }

// WithClock replaces time.Now.
func WithClock(now func() time.Time) Option { return func(h *Handler) { h.now = now } }

// New returns a handler.
func New(cfg Config, store EventStore, ledger Ledger, log *slog.Logger, opts ...Option) *Handler {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 25
	}
	if cfg.Flushers <= 0 {
		cfg.Flushers = 4
	}
	if cfg.DeliveryTimeout <= 0 {
		cfg.DeliveryTimeout = 10 * time.Second
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = 5 * time.Second
	}
	if cfg.QueueMax <= 0 {
		cfg.QueueMax = 1000
	}
	if cfg.QueueMaxBytes <= 0 {
		cfg.QueueMaxBytes = 64 << 20
	}
	if cfg.StuckAfter <= 0 {
		cfg.StuckAfter = 3 * cfg.BatchTimeout
	}
	h := &Handler{cfg: cfg, store: store, ledger: ledger, appliers: map[string]Applier{}, prepare: map[string]Preparer{}, log: log, now: time.Now}
	for _, o := range opts {
		o(h)
	}
	h.group = &groupCommit{
		maxBatch: cfg.MaxBatch, maxFlushers: cfg.Flushers,
		maxQueue: cfg.QueueMax, maxBytes: cfg.QueueMaxBytes, batchTimeout: cfg.BatchTimeout,
		process: h.processBatch, panicked: h.flushPanicked,
		dropped: func(n int) { h.shed(ShedCallerGone, n) },
	}
	return h
}

// flushPanicked logs and counts a panic recovered in a batch.
func (h *Handler) flushPanicked(v any, stack []byte, batch int) {
	h.log.Error("batch processing panicked; its deliveries failed and will be retried",
		"panic", fmt.Sprint(v), "events", batch, "stack", string(stack))
	if h.ingestObs != nil {
		h.ingestObs.FlushPanicked()
	}
}

func (h *Handler) shed(reason string, n int) {
	if h.ingestObs != nil {
		h.ingestObs.Shed(reason, n)
	}
}

// Stats is a snapshot of the ingest queue (metrics).
func (h *Handler) Stats() QueueStats { return h.group.stats(time.Now()) }

// Ready fails when the ingest path is stuck: the oldest queued delivery has
// waited longer than StuckAfter while no batch finished. Batches run under a
// deadline, so this only happens when something ignores it.
func (h *Handler) Ready(context.Context) error {
	if s := h.Stats(); s.Stalled > h.cfg.StuckAfter {
		return fmt.Errorf("ingest stalled: %d deliveries queued, the oldest for %s with no batch finished, %d batches in flight",
			s.Queued, s.Stalled.Round(time.Millisecond), s.Flushing)
	}
	return nil
}

// Handle records and processes one verified event. payload is the event's
// raw JSON, kept so the event can be re-driven without Stripe. An error means
// the event may not be processed: the caller must answer so that it is
// delivered again (5xx to Stripe).
func (h *Handler) Handle(ctx context.Context, ev *stripe.Event, payload []byte, source stripeevent.Source) (stripeevent.Outcome, error) {
	start := h.now()
	outcome, err := h.handle(ctx, ev, payload, source)
	if h.observer != nil {
		h.observer.Handled(string(ev.Type), outcome, h.now().Sub(start))
	}
	return outcome, err
}

func (h *Handler) handle(ctx context.Context, ev *stripe.Event, payload []byte, source stripeevent.Source) (stripeevent.Outcome, error) {
	rec := events.NewRecord(ev, payload, h.cfg.PlatformAccount, h.cfg.EventTTL, source, h.now())
	if ev.Livemode != h.cfg.Livemode {
		h.logger(rec).Warn("ignoring event whose livemode does not match the configured key", "livemode", ev.Livemode)
		return stripeevent.Ignored, nil
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.DeliveryTimeout)
	defer cancel()
	if err := ctx.Err(); err != nil {
		// The caller has gone (or its deadline passed): nobody would hear
		// the answer, and the sender delivers again.
		h.shed(ShedCallerGone, 1)
		return stripeevent.Failed, fmt.Errorf("dropped before processing: %w", err)
	}
	if wb := h.writeBehind(); wb != nil {
		// The record will be written behind the answer: refuse while the
		// table cannot take it (and wait while the backlog is full), so the
		// table never lags an outage's worth of acknowledged events.
		if err := wb.Admit(ctx); err != nil {
			h.logger(rec).Warn("events table unavailable: delivery refused, it will be retried", "error", err)
			return stripeevent.Failed, err
		}
	}
	p := &pending{ev: ev, rec: rec, done: make(chan struct{}), size: int64(len(payload))}
	if err := h.runPreparer(ctx, ev); err != nil {
		if !errors.Is(err, stripeevent.ErrUnprocessable) {
			h.recordFailure(ctx, rec, err)
			return stripeevent.Failed, err
		}
		p.unprocessable = err // rejected in its batch, its appliers skipped
	}
	outcome, err := h.group.submit(ctx, p)
	if errors.Is(err, stripeevent.ErrOverloaded) {
		h.shed(ShedQueueFull, 1)
		h.logger(rec).Warn("ingest queue full: delivery refused, it will be retried")
	}
	return outcome, err
}

// runPreparer runs the event type's preparer, outside any batch so that a
// slow Stripe call delays only its own delivery.
func (h *Handler) runPreparer(ctx context.Context, ev *stripe.Event) error {
	prepare, ok := h.prepare[string(ev.Type)]
	if !ok {
		return nil
	}
	if err := prepare(ctx, ev); err != nil {
		return fmt.Errorf("prepare event: %w", err)
	}
	return nil
}

func (h *Handler) logger(rec events.Record) *slog.Logger {
	return h.log.With("event_id", rec.ID, "event_type", rec.Type, "stripe_account", rec.StripeAccount, "source", string(rec.Source))
}

// applyEffects runs the appliers of ev's type, if any.
func (h *Handler) applyEffects(ctx context.Context, tx pgx.Tx, ev *stripe.Event) error {
	if apply, ok := h.appliers[string(ev.Type)]; ok {
		return apply(ctx, tx, ev)
	}
	return nil
}

// processBatch handles a group of deliveries:
//
//  1. one Postgres transaction claims the events in the ledger and applies
//     the effects of those it claimed (on error, each event is retried in a
//     transaction of its own so that one bad event fails alone); at the
//     same time, one strongly consistent BatchGetItem reads the records
//     already there: duplicates and the bookkeeping of earlier attempts;
//  2. one BatchWriteItem records every newly committed event as processed.
//
// A crash between 1 and 2 leaves no processed record; the delivery was not
// acknowledged, so it comes again (Stripe's retry or the poller), finds the
// ledger entry, and only writes the record.
//
// With the write-behind running, 1 also inserts the records of the events it
// claims (Postgres, same transaction), those deliveries are answered on the
// commit and the records handed to the queue; only the rest (claimed
// before, failed, unprocessable) goes through the read and write of 2.
func (h *Handler) processBatch(ctx context.Context, batch []*pending) {
	// The same event may be in the batch several times (concurrent
	// deliveries): the first copy is processed, the others share its fate.
	unique := make([]*pending, 0, len(batch))
	copies := map[string][]*pending{}
	for _, p := range batch {
		if _, seen := copies[p.rec.ID]; !seen {
			unique = append(unique, p)
		}
		copies[p.rec.ID] = append(copies[p.rec.ID], p)
	}
	finish := func(p *pending, outcome stripeevent.Outcome, err error) {
		for i, c := range copies[p.rec.ID] {
			c.outcome, c.err = outcome, err
			if i > 0 && err == nil {
				c.outcome = stripeevent.Duplicate
			}
			close(c.done)
		}
	}

	var (
		existing map[string]events.Record
		readErr  error
		applied  map[string]bool
		failures map[string]error
	)
	if wb := h.writeBehind(); wb != nil {
		// Claimed events are answered on the commit; only the others (a
		// redelivery, a failure, an unprocessable object) need the table.
		unique, applied, failures = h.commitRecorded(ctx, wb, unique, finish)
		if len(unique) == 0 {
			return
		}
		ids := make([]string, len(unique))
		for i, p := range unique {
			ids[i] = p.rec.ID
		}
		start := time.Now()
		existing, readErr = h.store.BatchGet(ctx, ids)
		h.observeStage(len(ids), "record", start)
	} else {
		existing, applied, failures, readErr = h.applyReadingBeside(ctx, unique)
	}

	var done []events.Record
	var committed []*pending
	var failed []failedRecord
	rejected := map[string]bool{}
	for _, p := range unique {
		prev, recorded := existing[p.rec.ID]
		failure := failures[p.rec.ID]
		switch {
		case readErr != nil:
			// Effects may be committed; without the old record the new one
			// cannot be written safely. The redelivery completes it.
			finish(p, stripeevent.Failed, fmt.Errorf("read event record: %w", readErr))
			continue
		case recorded && prev.Status == events.StatusProcessed && !applied[p.rec.ID]:
			h.logger(p.rec).Debug("duplicate event")
			finish(p, stripeevent.Duplicate, nil)
			continue
		case errors.Is(failure, stripeevent.ErrUnprocessable):
			// Retrying cannot help: record it processed, with no effect.
			rejected[p.rec.ID] = true
			p.rec.LastError = failure.Error() // the store bounds its length
		case failure != nil:
			failed = append(failed, failedRecord{p, failure})
			continue
		}
		if recorded {
			// Keep the first delivery's bookkeeping; count this attempt.
			p.rec.ReceivedAt, p.rec.Source, p.rec.Attempts = prev.ReceivedAt, prev.Source, prev.Attempts+1
		}
		p.rec.Status, p.rec.ProcessedAt = events.StatusProcessed, h.now().UTC()
		done = append(done, p.rec)
		committed = append(committed, p)
	}
	// Failures are recorded all at once, beside the batch's write, each
	// caller answered once its record is written (or could not be).
	var recording sync.WaitGroup
	defer recording.Wait()
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
	if len(done) == 0 {
		return
	}
	if err := h.store.PutProcessed(ctx, done); err != nil {
		for _, p := range committed {
			// The effects are committed; a redelivery finds the ledger
			// entry and only writes the record.
			h.logger(p.rec).Error("could not record processed event", "error", err)
			finish(p, stripeevent.Failed, fmt.Errorf("record processed event: %w", err))
		}
		return
	}
	for _, p := range committed {
		if rejected[p.rec.ID] {
			h.logger(p.rec).Error("event rejected: its object cannot be processed; recorded as processed with no effect",
				"error", failures[p.rec.ID])
			finish(p, stripeevent.Rejected, nil)
			continue
		}
		if applied[p.rec.ID] {
			h.logger(p.rec).Info("event processed")
			finish(p, stripeevent.Applied, nil)
		} else {
			h.logger(p.rec).Info("event completed; effects were already applied")
			finish(p, stripeevent.Completed, nil)
		}
	}
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
	refs := make([]tracking.EventRef, len(todo))
	for i, p := range todo {
		byID[p.rec.ID] = p
		refs[i] = tracking.EventRef{ID: p.rec.ID, Type: p.rec.Type, StripeAccount: p.rec.StripeAccount, Created: p.rec.Created}
	}
	failures = map[string]error{}
	if len(todo) > 1 {
		applied, err := h.ledger.ApplyBatch(ctx, refs, func(ctx context.Context, tx pgx.Tx, ref tracking.EventRef) error {
			return h.applyEffects(ctx, tx, byID[ref.ID].ev)
		})
		if err == nil {
			return applied, failures
		}
		h.log.Warn("batch transaction failed; retrying its events one by one", "events", len(todo), "error", err)
	}
	applied = map[string]bool{}
	for i, p := range todo {
		ok, err := h.ledger.Apply(ctx, refs[i], func(ctx context.Context, tx pgx.Tx) error {
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

// Drain waits until no batch is in flight, so that shutdown closes the
// stores only after deliveries whose senders gave up have finished.
func (h *Handler) Drain(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !h.group.idle() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain handler: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
