package recordq

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stripe-payments/stripe-payments/internal/events"
)

// sweep hands over the rows older than age.
func (q *Queue) sweep(ctx context.Context, age time.Duration) error {
	for {
		qctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
		rows, err := q.pool.Query(qctx, `SELECT record, payload FROM event_records_pending
			WHERE enqueued_at <= now() - $1::interval ORDER BY enqueued_at LIMIT 1000`, age)
		if err != nil {
			cancel()
			return fmt.Errorf("sweep pending event records: %w", err)
		}
		found, err := collect(rows)
		cancel()
		if err != nil {
			return err
		}
		recs := make([]events.Record, 0, len(found))
		q.mu.Lock()
		for _, r := range found {
			if !q.known[r.ID] {
				recs = append(recs, r)
			}
		}
		q.mu.Unlock()
		if len(recs) > 0 {
			q.cfg.Log.Info("writing event records left pending", "records", len(recs))
			q.Hand(recs)
		}
		if len(found) < 1000 || len(recs) == 0 {
			return nil
		}
		// More than a page is pending: let the writers catch up on this
		// page first. Not Flush: live traffic may keep the queue from ever
		// being empty, and the next pages would never be taken up.
		if err := q.written(ctx, recs); err != nil {
			return err
		}
	}
}

// written waits until none of recs is waiting or being written here.
func (q *Queue) written(ctx context.Context, recs []events.Record) error {
	return q.waitWritten(ctx, "sweep pending event records", func() int {
		left := 0
		for _, r := range recs {
			if q.known[r.ID] {
				left++
			}
		}
		return left
	})
}

// take waits for records and takes up to a batch of them; nil when ctx ends.
func (q *Queue) take(ctx context.Context) []events.Record {
	q.mu.Lock()
	for len(q.waiting) == 0 {
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
		q.mu.Lock()
	}
	if len(q.waiting) < batchSize {
		// Let the batch fill a little: this delays the table write only.
		q.mu.Unlock()
		select {
		case <-time.After(q.cfg.Linger):
		case <-ctx.Done():
			return nil
		}
		q.mu.Lock()
		if len(q.waiting) == 0 { // another writer took them
			q.mu.Unlock()
			return q.take(ctx)
		}
	}
	n := min(len(q.waiting), batchSize)
	batch := append([]events.Record(nil), q.waiting[:n]...)
	q.waiting = append(q.waiting[:0:0], q.waiting[n:]...)
	q.mu.Unlock()
	return batch
}

// write is one writer's loop.
func (q *Queue) write(ctx context.Context) {
	failures := 0
	for {
		batch := q.take(ctx)
		if batch == nil {
			return
		}
		start := time.Now()
		// A panic in the write fails the batch, which is retried like any
		// failed write: the records stay handed over, never dropped.
		err := q.cfg.Safe.Do("records_write", func() error { return q.writeBatch(ctx, batch) })
		if q.cfg.Observer != nil {
			q.cfg.Observer.RecordsWritten(len(batch), time.Since(start), err)
		}
		q.mu.Lock()
		if err != nil {
			q.failing = err
			q.waiting = append(batch, q.waiting...) // first again, once the table answers
		} else {
			q.failing = nil
			for _, r := range batch {
				delete(q.known, r.ID)
			}
		}
		q.broadcast()
		q.observeBacklog()
		q.mu.Unlock()
		if err == nil {
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		q.cfg.Log.Error("could not write event records to the events table; retrying", "records", len(batch), "error", err)
		failures++
		select {
		case <-time.After(min(50*time.Millisecond<<min(failures, 6), 2*time.Second)):
		case <-ctx.Done():
			return
		}
	}
}

// writeBatch writes one batch to the table, keeping the bookkeeping of an
// earlier failed delivery (first received_at and source, attempts + 1), and
// deletes its pending rows.
func (q *Queue) writeBatch(ctx context.Context, batch []events.Record) error {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	ids := make([]string, len(batch))
	for i, r := range batch {
		ids[i] = r.ID
	}
	existing, err := q.table.BatchGet(ctx, ids)
	if err != nil {
		return err
	}
	put := make([]events.Record, 0, len(batch))
	for _, r := range batch {
		if prev, ok := existing[r.ID]; ok {
			if events.Covers(prev, r) {
				continue // written before (a lost delete, another instance's sweep)
			}
			r = events.Supersede(prev, r)
		}
		put = append(put, r)
	}
	if err := q.table.PutProcessed(ctx, put); err != nil {
		return err
	}
	// The record is in the table: losing this delete in a crash only means
	// a sweep finds the row and deletes it, so it need not wait for fsync.
	err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM event_records_pending WHERE event_id = ANY($1)`, ids)
		return err
	})
	if err != nil {
		// Not a write failure: the records are in the table. A sweep
		// deletes the rows later.
		q.cfg.Log.Warn("could not delete written pending event records", "records", len(ids), "error", err)
	}
	return nil
}
