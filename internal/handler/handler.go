// Package handler is the one event handler shared by the webhook, the poller
// and replays. Every event is applied at most once to Postgres (a
// processed-events ledger claimed in the transaction of its effects) and
// recorded in DynamoDB as processed only after that transaction committed.
//
// What runs for each event type is the route table (routes.go), one file to
// read top to bottom; a batch's way through the ledger is batch.go.
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
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
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
	Apply(ctx context.Context, ev ledger.EventRef, effects func(ctx context.Context, tx Tx) error) (bool, error)
	ApplyBatch(ctx context.Context, refs []ledger.EventRef, effects func(ctx context.Context, tx Tx, ev ledger.EventRef) error) (map[string]bool, error)
	// ApplyBatchThen is ApplyBatch with a last step, in the transaction,
	// given the ids newly claimed.
	ApplyBatchThen(ctx context.Context, refs []ledger.EventRef, effects func(ctx context.Context, tx Tx, ev ledger.EventRef) error,
		then func(ctx context.Context, tx Tx, claimed []string) error) (map[string]bool, error)
}

// Observer is told the outcome of every Handle call (metrics).
type Observer interface {
	Handled(eventType string, outcome stripeevent.Outcome, elapsed time.Duration)
}

// DeliveryObserver, when the Observer also implements it, is told of every
// event given to the handler: where it came from, its api_version and
// whether that is the expected one (Config.APIVersion). Not the account it
// is about: a metric labelled by account has one series per merchant.
// An event with another version may lack fields the handler reads (the
// silent field loss of an unpinned version change), so it is counted.
type DeliveryObserver interface {
	Delivered(source stripeevent.Source, apiVersion string, expected bool)
}

// IngestObserver is told about the ingest path's protections at work
// (metrics); see WithIngestObserver.
type IngestObserver interface {
	// FlushPanicked: a batch's processing panicked; its deliveries failed.
	FlushPanicked()
	// QueueFull: n deliveries refused at once on a full queue.
	QueueFull(n int)
	// CallerGone: n deliveries dropped before processing, their callers
	// gone (or past their deadline).
	CallerGone(n int)
}

// Config of the handler. A zero setting takes the ingest default of
// package config (config.DefaultIngest*), the one `serve` runs with.
type Config struct {
	PlatformAccount string
	EventTTL        time.Duration
	Livemode        bool
	// APIVersion is the api_version events are expected to carry
	// (STRIPE_API_VERSION); empty: not checked. An event without one (a
	// thin event's re-drive) is not counted as unexpected.
	APIVersion string
	// MaxBatch bounds a group commit (DynamoDB's BatchWriteItem limit);
	// 1 processes every event on its own.
	MaxBatch int
	// Flushers is how many batches may be in flight at once, so that one
	// batch's Postgres work overlaps another's DynamoDB write.
	Flushers int
	// DeliveryTimeout bounds one Handle call: preparer, wait in the queue
	// and batch. Past it the caller gets an error (5xx).
	DeliveryTimeout time.Duration
	// BatchTimeout bounds one batch's Postgres and DynamoDB work, so a
	// dependency that stops answering frees the flusher.
	BatchTimeout time.Duration
	// QueueMax and QueueMaxBytes bound the deliveries waiting for a batch
	// and their payload; beyond, Handle fails at once with
	// stripeevent.ErrOverloaded.
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
	table     Routes           // as given (WithRoutes)
	routes    map[string]Route // by event type
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

// WithRoutes sets the route table (routes.go): what runs for each event
// type. Without it every event is recorded with no effect. A later
// WithRoutes replaces an earlier one; to add a step, use Routes.With.
func WithRoutes(r Routes) Option { return func(h *Handler) { h.table = r } }

// WithObserver sets the outcome observer.
func WithObserver(o Observer) Option { return func(h *Handler) { h.observer = o } }

// WithIngestObserver sets the observer of panics and shed deliveries.
func WithIngestObserver(o IngestObserver) Option { return func(h *Handler) { h.ingestObs = o } }

// WithClock replaces time.Now.
func WithClock(now func() time.Time) Option { return func(h *Handler) { h.now = now } }

// New returns a handler. It panics on a route table that fails
// Routes.Check: a wiring mistake, which every test that builds the handler
// finds (app.New checks the table first and returns the error).
func New(cfg Config, store EventStore, ledger Ledger, log *slog.Logger, opts ...Option) *Handler {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = config.DefaultIngestMaxBatch
	}
	if cfg.Flushers <= 0 {
		cfg.Flushers = config.DefaultIngestFlushers
	}
	if cfg.DeliveryTimeout <= 0 {
		cfg.DeliveryTimeout = config.DefaultIngestTimeout
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = config.DefaultIngestBatchTimeout
	}
	if cfg.QueueMax <= 0 {
		cfg.QueueMax = config.DefaultIngestQueueMax
	}
	if cfg.QueueMaxBytes <= 0 {
		cfg.QueueMaxBytes = config.DefaultIngestQueueMaxBytes
	}
	if cfg.StuckAfter <= 0 {
		cfg.StuckAfter = 3 * cfg.BatchTimeout
	}
	h := &Handler{cfg: cfg, store: store, ledger: ledger, log: log, now: time.Now}
	for _, o := range opts {
		o(h)
	}
	if err := h.table.Check(); err != nil {
		panic(fmt.Sprintf("handler: invalid route table: %v", err))
	}
	h.routes = h.table.byType()
	h.group = &groupCommit{
		maxBatch: cfg.MaxBatch, maxFlushers: cfg.Flushers,
		maxQueue: cfg.QueueMax, maxBytes: cfg.QueueMaxBytes, batchTimeout: cfg.BatchTimeout,
		process: h.processBatch, panicked: h.flushPanicked,
		dropped: h.callerGone,
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

// callerGone counts deliveries dropped because nobody waits for them.
func (h *Handler) callerGone(n int) {
	if h.ingestObs != nil {
		h.ingestObs.CallerGone(n)
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
	// Counted once taken in (past the livemode check and admission): an
	// ignored or refused delivery is not traffic to the silence alerts.
	delivered := func() {
		if d, ok := h.observer.(DeliveryObserver); ok {
			d.Delivered(source, rec.APIVersion,
				h.cfg.APIVersion == "" || rec.APIVersion == "" || rec.APIVersion == h.cfg.APIVersion)
		}
	}
	if ev.Livemode != h.cfg.Livemode {
		h.logger(rec).Warn("ignoring event whose livemode does not match the configured key", "livemode", ev.Livemode)
		return stripeevent.Ignored, nil
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.DeliveryTimeout)
	defer cancel()
	if err := ctx.Err(); err != nil {
		// The caller has gone (or its deadline passed): nobody would hear
		// the answer, and the sender delivers again.
		h.callerGone(1)
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
			delivered()
			h.recordFailure(ctx, rec, err)
			return stripeevent.Failed, err
		}
		p.unprocessable = err // rejected in its batch, its appliers skipped
	}
	outcome, err := h.group.submit(ctx, p)
	if !errors.Is(err, stripeevent.ErrOverloaded) {
		delivered()
	} else {
		if h.ingestObs != nil {
			h.ingestObs.QueueFull(1)
		}
		h.logger(rec).Warn("ingest queue full: delivery refused, it will be retried")
	}
	return outcome, err
}

// Routes is the route table the handler runs.
func (h *Handler) Routes() Routes { return append(Routes(nil), h.table...) }

// runPreparer runs the event type's preparer, outside any batch so that a
// slow Stripe call delays only its own delivery.
func (h *Handler) runPreparer(ctx context.Context, ev *stripe.Event) error {
	prepare := h.routes[string(ev.Type)].Prepare
	if prepare == nil {
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
