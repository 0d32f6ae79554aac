// Package recordq is the write-behind of the events table. The handler
// inserts the record of every event a batch claims into a Postgres table
// (event_records_pending) in the batch's own transaction, so the webhook can
// acknowledge on the durable commit; the queue then copies the records to
// the events table (docs/architecture.md, step 5) and deletes the rows. Until a row is
// deleted the events store reads the record from Postgres (Lookup), so an
// acknowledged event is never absent from the internal API.
//
// A crash leaves rows behind; Run writes them on start, and every instance
// periodically sweeps rows older than SweepAge (an instance that died, or a
// write that failed). Writes are idempotent: a record already processed in
// the table is left alone, and the row deleted.
package recordq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/pgtx"
	"github.com/stripe-payments/stripe-payments/internal/safego"
)

// ErrUnavailable is returned by Admit while records cannot be written to
// the events table: deliveries are refused (5xx) rather than let the
// backlog grow while the table is down.
var ErrUnavailable = errors.New("events table unavailable")

// Table is the events table, without the read-through of this queue.
type Table interface {
	// BatchGet reads existing records, strongly consistent.
	BatchGet(ctx context.Context, ids []string) (map[string]events.Record, error)
	// PutProcessed writes processed records; those with IfAbsent only
	// where the table holds no record of their event, answering an
	// *events.NotWrittenError that names the others.
	PutProcessed(ctx context.Context, recs []events.Record) error
}

// Observer is told about every batch written (metrics).
type Observer interface {
	RecordsWritten(n int, elapsed time.Duration, err error)
	RecordBacklog(n int)
}

// QuarantineObserver, when the Observer implements it too, is told of
// every record quarantined and of the backlog's bytes.
type QuarantineObserver interface {
	RecordsQuarantined(n int)
	RecordBacklogBytes(n int64)
}

// Config of a Queue; zero values take the defaults.
type Config struct {
	// Writers is how many table writes may be in flight (4). The first
	// writer writes whatever waits; the others join only while it falls
	// behind (HelpAfter), so at a rate one writer keeps up with, one write
	// is in flight: DynamoDB Local runs conditional transactions one at a
	// time, and four in flight only made each wait for the others while
	// the answer path shared their cores (BENCHMARKS.md).
	Writers int
	// HelpAfter: a writer beyond the first takes a batch only when a full
	// one (Batch) waits or the oldest waiting record has waited Linger and
	// this much longer (250 ms): a backlog, a write stuck on a throttled
	// partition.
	HelpAfter time.Duration
	// MaxBacklog bounds the records acknowledged but not yet in the table;
	// at the bound Admit waits (2,000).
	MaxBacklog int
	// MaxBacklogBytes bounds their payload bytes too (64 MiB). The queue
	// holds ids and sizes only: a writer reads the payloads from Postgres
	// when it writes them.
	MaxBacklogBytes int64
	// SweepPageBytes bounds the payload bytes of one sweep page (8 MiB;
	// a page is also at most 1,000 rows).
	SweepPageBytes int64
	// QuarantineAfter is how many writes the table refuses for good (a
	// validation error, a row that cannot be decoded) before the record
	// leaves the queue for event_records_quarantined (5): one such record
	// must not stop admission for every other.
	QuarantineAfter int
	// Batch is how many records one writer takes at a time (100, at most
	// 100): its fresh records go in one conditional TransactWriteItems,
	// the others in BatchWriteItems of 25 (BENCHMARKS.md).
	Batch int
	// Linger is how long the oldest waiting record may wait for a batch to
	// fill (10 ms): it delays only the table write, never
	// an acknowledgement, and saves requests at low load.
	Linger time.Duration
	// SweepEvery and SweepAge: how often rows older than SweepAge that this
	// instance is not writing are taken up (10 s, 30 s).
	SweepEvery, SweepAge time.Duration
	// Timeout bounds one batch's work (read, write, delete) and one sweep
	// (5 s), so a dependency that stops answering (a partition: nothing is
	// refused, nothing comes back) fails the batch, which is retried,
	// instead of holding a writer for good.
	Timeout  time.Duration
	Log      *slog.Logger
	Observer Observer
	// Safe starts the writers and recovers a panic in a batch's write or
	// a sweep (nil: a starter that only logs).
	Safe *safego.Starter
}

// maxBatch bounds Config.Batch: DynamoDB's TransactWriteItems and
// BatchGetItem take 100 items.
const maxBatch = 100

// Queue is the write-behind of one instance.
type Queue struct {
	pool  *pgxpool.Pool
	table Table
	cfg   Config

	running atomic.Bool // Run is writing: the handler may acknowledge before the table write

	mu      sync.Mutex
	waiting []pend         // handed over, not yet taken by a writer
	known   map[string]int // ids waiting or being written here, and their payload bytes
	bytes   int64          // the sum of known's bytes
	refused map[string]int // writes the table refused for good, by id
	failing error          // the last write's error; nil once one succeeds
	changed chan struct{}  // closed and replaced on every change (broadcast)
}

// pend is a record handed over: its id and payload size, never its
// payload, which stays in Postgres until a writer reads it.
type pend struct {
	id    string
	bytes int
	since time.Time // handed over (HelpAfter)
}

// New returns a queue over pool's event_records_pending table, writing to table.
func New(pool *pgxpool.Pool, table Table, cfg Config) *Queue {
	if cfg.Writers <= 0 {
		cfg.Writers = 4
	}
	if cfg.Batch <= 0 || cfg.Batch > maxBatch {
		cfg.Batch = maxBatch
	}
	if cfg.MaxBacklog <= 0 {
		cfg.MaxBacklog = 2000
	}
	if cfg.MaxBacklogBytes <= 0 {
		cfg.MaxBacklogBytes = 64 << 20
	}
	if cfg.SweepPageBytes <= 0 {
		cfg.SweepPageBytes = 8 << 20
	}
	if cfg.QuarantineAfter <= 0 {
		cfg.QuarantineAfter = 5
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 10 * time.Millisecond
	}
	if cfg.HelpAfter <= 0 {
		cfg.HelpAfter = 250 * time.Millisecond
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = 10 * time.Second
	}
	if cfg.SweepAge <= 0 {
		cfg.SweepAge = 30 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Safe = cfg.Safe.OrDefault(cfg.Log)
	return &Queue{pool: pool, table: table, cfg: cfg, known: map[string]int{}, refused: map[string]int{}, changed: make(chan struct{})}
}

// Enqueue inserts recs (processed, their effects committed by tx) as pending
// rows in tx: they become durable with the batch's commit. The writer reads
// their records in the table first (an earlier version may be there).
func (q *Queue) Enqueue(ctx context.Context, tx pgtx.Tx, recs []events.Record) error {
	return q.enqueue(ctx, tx, recs, false)
}

// EnqueueClaimed is Enqueue for events tx itself claimed in the ledger: an
// earlier version of their records can be in the table only if a failure
// or a rejection left it, and those are marked (Mark) before they are
// written, so the writer reads only the marked ones. It writes the others
// IfAbsent: a failure recorded without its mark (Postgres down, an older
// replica) or racing the writer is read and superseded, never overwritten:
// the superseding write too is conditional on the record read (supersede).
func (q *Queue) EnqueueClaimed(ctx context.Context, tx pgtx.Tx, recs []events.Record) error {
	return q.enqueue(ctx, tx, recs, true)
}

// Mark notes, durably, that the records of ids are about to be written to
// the events table outside this queue (a failure, a rejection). It must
// commit before that write: a writer that loads a claimed event's pending
// row after it reads the table before writing, and so supersedes that
// record instead of overwriting it.
func (q *Queue) Mark(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := q.pool.Exec(ctx, `INSERT INTO event_records_prior (event_id) SELECT unnest($1::text[])
		ON CONFLICT (event_id) DO NOTHING`, ids); err != nil {
		return fmt.Errorf("mark %d event records written outside the write-behind: %w", len(ids), err)
	}
	return nil
}

func (q *Queue) enqueue(ctx context.Context, tx pgtx.Tx, recs []events.Record, fresh bool) error {
	if len(recs) == 0 {
		return nil
	}
	ids := make([]string, len(recs))
	metas := make([][]byte, len(recs))
	payloads := make([][]byte, len(recs))
	for i, r := range recs {
		m, err := encode(r)
		if err != nil {
			return err
		}
		ids[i], metas[i], payloads[i] = r.ID, m, r.Payload
	}
	if _, err := tx.Exec(ctx, `INSERT INTO event_records_pending (event_id, record, payload, fresh)
		SELECT *, $4::boolean FROM unnest($1::text[], $2::bytea[], $3::bytea[]) ON CONFLICT (event_id) DO NOTHING`,
		ids, metas, payloads, fresh); err != nil {
		return fmt.Errorf("enqueue event records: %w", err)
	}
	return nil
}

// Hand gives the writers records whose pending rows are committed. Only
// their ids and sizes are kept: the writers read the rows.
func (q *Queue) Hand(recs []events.Record) {
	ps := make([]pend, len(recs))
	for i, r := range recs {
		ps[i] = pend{id: r.ID, bytes: len(r.Payload)}
	}
	q.hand(ps)
}

func (q *Queue) hand(ps []pend) {
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range ps {
		if _, ok := q.known[p.id]; !ok {
			p.since = now
			q.known[p.id] = p.bytes
			q.bytes += int64(p.bytes)
			q.waiting = append(q.waiting, p)
		}
	}
	q.broadcast()
	q.observeBacklog()
}

// forget removes id from the backlog; q.mu must be held.
func (q *Queue) forget(id string) {
	if n, ok := q.known[id]; ok {
		q.bytes -= int64(n)
		delete(q.known, id)
	}
	delete(q.refused, id)
}

// broadcast wakes every waiter; q.mu must be held.
func (q *Queue) broadcast() {
	close(q.changed)
	q.changed = make(chan struct{})
}

func (q *Queue) observeBacklog() {
	if q.cfg.Observer != nil {
		q.cfg.Observer.RecordBacklog(len(q.known))
		if o, ok := q.cfg.Observer.(QuarantineObserver); ok {
			o.RecordBacklogBytes(q.bytes)
		}
	}
}

// Admit is asked before a delivery is processed: it fails with
// ErrUnavailable while writes to the table fail, and waits while the
// backlog is at MaxBacklog records or MaxBacklogBytes (until ctx ends). A
// record the table refuses for good does not count as a failing table: it
// is retried, then quarantined, while admission goes on.
func (q *Queue) Admit(ctx context.Context) error {
	q.mu.Lock()
	for {
		if q.failing != nil {
			err := q.failing
			q.mu.Unlock()
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if len(q.known) < q.cfg.MaxBacklog && q.bytes < q.cfg.MaxBacklogBytes {
			q.mu.Unlock()
			return nil
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: backlog of %d records or %d bytes: %w", ErrUnavailable, q.cfg.MaxBacklog, q.cfg.MaxBacklogBytes, ctx.Err())
		}
		q.mu.Lock()
	}
}

// Backlog is the number of records handed over and not yet written.
func (q *Queue) Backlog() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.known)
}

// BacklogBytes is the payload bytes of those records.
func (q *Queue) BacklogBytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes
}

// Lookup reads pending records by id (the events store's read-through),
// quarantined ones included: an acknowledged event stays readable.
func (q *Queue) Lookup(ctx context.Context, ids []string) (map[string]events.Record, error) {
	rows, err := q.pool.Query(ctx, `SELECT record, payload FROM event_records_pending WHERE event_id = ANY($1)
		UNION ALL SELECT record, payload FROM event_records_quarantined WHERE event_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("look up pending event records: %w", err)
	}
	return collect(rows)
}

func collect(rows pgx.Rows) (map[string]events.Record, error) {
	found := map[string]events.Record{}
	var meta, payload []byte
	_, err := pgx.ForEachRow(rows, []any{&meta, &payload}, func() error {
		r, err := decode(meta, payload)
		if err != nil {
			return err
		}
		found[r.ID] = r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read pending event records: %w", err)
	}
	return found, nil
}

// Run writes records until ctx ends: first the rows a previous process left,
// then what Hand gives, with periodic sweeps. Call Flush before cancelling
// ctx to write everything handed over.
func (q *Queue) Run(ctx context.Context) error {
	q.running.Store(true)
	defer q.running.Store(false)
	var wg sync.WaitGroup
	for i := range q.cfg.Writers {
		helper := i > 0
		q.cfg.Safe.Go(ctx, &wg, "records_writer", func(ctx context.Context) { q.write(ctx, helper) })
	}
	if err := q.safeSweep(ctx, 0); err != nil && ctx.Err() == nil {
		q.cfg.Log.Error("could not read pending event records at start; the periodic sweep retries", "error", err)
	}
	t := time.NewTicker(q.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-t.C:
			if err := q.safeSweep(ctx, q.cfg.SweepAge); err != nil && ctx.Err() == nil {
				q.cfg.Log.Warn("sweep of pending event records failed", "error", err)
			}
		}
	}
}

// safeSweep is sweep with a panic turned into its error.
func (q *Queue) safeSweep(ctx context.Context, age time.Duration) error {
	return q.cfg.Safe.Do("records_sweep", func() error { return q.sweep(ctx, age) })
}

// Running reports whether Run is writing records: only then may a record
// be left to the queue (a process without writers, such as an in-process
// poll, writes its records itself).
func (q *Queue) Running() bool { return q.running.Load() }

// Flush waits until every record handed over is written (or ctx ends).
func (q *Queue) Flush(ctx context.Context) error {
	return q.waitWritten(ctx, "flush event records", func() int { return len(q.known) })
}

// waitWritten waits until left, called under q.mu, counts no record still
// waiting or being written here (or ctx ends: the error names what).
func (q *Queue) waitWritten(ctx context.Context, what string, left func() int) error {
	q.mu.Lock()
	for {
		n := left()
		if n == 0 {
			q.mu.Unlock()
			return nil
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s: %d not written: %w", what, n, ctx.Err())
		}
		q.mu.Lock()
	}
}

// SettleWait and SettleQueries bound Settled: a listing waits for the
// records acknowledged before it (milliseconds at any load the writers keep
// up with) but does not hold a request and a Postgres connection while the
// table is down, and polls Postgres a bounded number of times (the backoff
// between re-checks grows to settlePollMax).
const (
	SettleWait     = 2 * time.Second
	SettleQueries  = 12
	settlePollMin  = 5 * time.Millisecond
	settlePollMax  = 250 * time.Millisecond
	settleRechecks = SettleQueries - 1 // the first query reads the pending ids
)

// Settled waits until every record pending (in Postgres, from any
// instance) when it is called has left: written to the table. Index
// listings call it, so that a listing made after a 200 shows the event. It
// gives up after SettleWait or SettleQueries queries (or when ctx ends),
// with ErrUnavailable, rather than list without records it knows are
// missing.
func (q *Queue) Settled(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, SettleWait)
	defer cancel()
	rows, err := q.pool.Query(ctx, `SELECT event_id FROM event_records_pending`)
	if err != nil {
		return fmt.Errorf("read pending event records: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read pending event records: %w", err)
	}
	left := len(ids)
	wait := settlePollMin
	for range settleRechecks {
		if left == 0 {
			return nil
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("%w: %d event records still being written: %w", ErrUnavailable, left, ctx.Err())
		}
		wait = min(2*wait, settlePollMax)
		if err := q.pool.QueryRow(ctx, `SELECT count(*) FROM event_records_pending WHERE event_id = ANY($1)`, ids).Scan(&left); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: %d event records still being written: %w", ErrUnavailable, left, err)
			}
			return fmt.Errorf("read pending event records: %w", err)
		}
	}
	if left == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d event records still being written after %d checks", ErrUnavailable, left, settleRechecks)
}
