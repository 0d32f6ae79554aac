package recordq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/smithy-go"
	"github.com/jackc/pgx/v5"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/safego"
)

// sweepRows bounds the rows of one sweep page (SweepPageBytes bounds their
// payload bytes).
const sweepRows = 1000

// sweep hands over the rows older than age, a page at a time: at most
// sweepRows rows and about SweepPageBytes of payload (a page holds at
// least one row), so a sweep never adds more than a page to the backlog.
func (q *Queue) sweep(ctx context.Context, age time.Duration) error {
	for {
		qctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
		rows, err := q.pool.Query(qctx, `SELECT event_id, octet_length(payload) FROM event_records_pending
			WHERE enqueued_at <= now() - $1::interval ORDER BY enqueued_at LIMIT $2`, age, sweepRows)
		if err != nil {
			cancel()
			return fmt.Errorf("sweep pending event records: %w", err)
		}
		var found []pend
		var p pend
		var total int64
		full := false
		_, err = pgx.ForEachRow(rows, []any{&p.id, &p.bytes}, func() error {
			if len(found) > 0 && total+int64(p.bytes) > q.cfg.SweepPageBytes {
				full = true
				return nil
			}
			total += int64(p.bytes)
			found = append(found, p)
			return nil
		})
		cancel()
		if err != nil {
			return fmt.Errorf("sweep pending event records: %w", err)
		}
		page := make([]pend, 0, len(found))
		q.mu.Lock()
		for _, p := range found {
			if _, ok := q.known[p.id]; !ok {
				page = append(page, p)
			}
		}
		q.mu.Unlock()
		if len(page) > 0 {
			q.cfg.Log.Info("writing event records left pending", "records", len(page), "bytes", total)
			q.hand(page)
		}
		if (len(found) < sweepRows && !full) || len(page) == 0 {
			return nil
		}
		// More than a page is pending: let the writers catch up on this
		// page first. Not Flush: live traffic may keep the queue from ever
		// being empty, and the next pages would never be taken up.
		if err := q.written(ctx, page); err != nil {
			return err
		}
	}
}

// written waits until none of ps is waiting or being written here.
func (q *Queue) written(ctx context.Context, ps []pend) error {
	return q.waitWritten(ctx, "sweep pending event records", func() int {
		left := 0
		for _, p := range ps {
			if _, ok := q.known[p.id]; ok {
				left++
			}
		}
		return left
	})
}

// take waits for records and takes up to a batch of them; nil when ctx
// ends. It takes a batch once a full one waits or the oldest waiting record
// has waited Linger (the batch fills a little; this delays the table write
// only), or Linger + HelpAfter for a writer beyond the first, so the others
// never go before the first (Config.HelpAfter). Both count from when the
// record was handed over, not from when the writer looks: a writer back
// from a long write takes what waited during it at once.
func (q *Queue) take(ctx context.Context, helper bool) []pend {
	after := q.cfg.Linger
	if helper {
		after += q.cfg.HelpAfter
	}
	q.mu.Lock()
	for {
		wait := time.Duration(-1) // until something changes
		if n := len(q.waiting); n >= q.cfg.Batch {
			break
		} else if n > 0 {
			// Mostly the oldest: hand appends and a retried batch goes
			// first, but a record put back alone (a failed quarantine)
			// goes last; it is then taken with the batches before it.
			if wait = after - time.Since(q.waiting[0].since); wait <= 0 {
				break
			}
		}
		ch := q.changed
		q.mu.Unlock()
		var due <-chan time.Time
		if wait > 0 {
			due = time.After(wait)
		}
		select {
		case <-ch:
		case <-due:
		case <-ctx.Done():
			return nil
		}
		q.mu.Lock()
	}
	return q.next()
}

// next takes the next batch off waiting; q.mu must be held, and is released.
func (q *Queue) next() []pend {
	n := min(len(q.waiting), q.cfg.Batch)
	batch := append([]pend(nil), q.waiting[:n]...)
	q.waiting = append(q.waiting[:0:0], q.waiting[n:]...)
	q.mu.Unlock()
	return batch
}

// errPoison marks a write refused for good: retrying the same record gives
// the same answer.
var errPoison = errors.New("refused for good")

// refusedForGood reports whether err is the table refusing the record
// itself (not the table being unavailable): a validation error, a record
// that cannot be decoded or encoded, a panic while writing it.
func refusedForGood(err error) bool {
	if errors.Is(err, errPoison) {
		return true
	}
	var pe *safego.PanicError
	if errors.As(err, &pe) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ValidationException", "SerializationException", "ItemCollectionSizeLimitExceededException":
			return true
		}
	}
	return false
}

// write is one writer's loop; a helper is a writer beyond the first
// (Config.HelpAfter).
func (q *Queue) write(ctx context.Context, helper bool) {
	failures := 0
	for {
		batch := q.take(ctx, helper)
		if batch == nil {
			return
		}
		start := time.Now()
		results := q.writeEach(ctx, batch)
		var err error // the batch's error when the table failed (an outage)
		var poisoned []pend
		q.mu.Lock()
		var again []pend
		for _, p := range batch {
			switch perr := results[p.id]; {
			case perr == nil:
				q.forget(p.id)
			case refusedForGood(perr):
				q.refused[p.id]++
				if q.refused[p.id] >= q.cfg.QuarantineAfter {
					poisoned = append(poisoned, p)
				} else {
					again = append(again, p)
				}
				if err == nil {
					err = perr
				}
			case errors.Is(perr, errStillChanging):
				err = perr
				again = append(again, p)
			default:
				err = perr
				q.failing = perr
				again = append(again, p)
			}
		}
		if err == nil || refusedForGood(err) || errors.Is(err, errStillChanging) {
			q.failing = nil // the table answers: only some records are refused
		}
		q.waiting = append(again, q.waiting...) // first again, once the table answers
		q.broadcast()
		q.observeBacklog()
		q.mu.Unlock()
		if q.cfg.Observer != nil {
			q.cfg.Observer.RecordsWritten(len(batch), time.Since(start), err)
		}
		for _, p := range poisoned {
			q.quarantine(ctx, p, results[p.id])
		}
		if err == nil {
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		q.cfg.Log.Error("could not write event records to the events table; retrying", "records", len(again), "error", err)
		failures++
		select {
		case <-time.After(min(50*time.Millisecond<<min(failures, 6), 2*time.Second)):
		case <-ctx.Done():
			return
		}
	}
}

// writeEach writes batch and answers each id's error: the batch's error for
// every id, except that a batch refused for good is written again one
// record at a time, to find which records the table refuses.
func (q *Queue) writeEach(ctx context.Context, batch []pend) map[string]error {
	results := make(map[string]error, len(batch))
	err := q.cfg.Safe.Do("records_write", func() error { return q.writeBatch(ctx, batch) })
	if err != nil && refusedForGood(err) && len(batch) > 1 {
		for _, p := range batch {
			one := []pend{p}
			results[p.id] = q.cfg.Safe.Do("records_write", func() error { return q.writeBatch(ctx, one) })
		}
		return results
	}
	for _, p := range batch {
		results[p.id] = err
	}
	return results
}

// load reads the pending rows of batch (a row another instance wrote and
// deleted meanwhile is absent: nothing to write), and the ids whose record
// may have an earlier version in the table: rows not inserted by their
// event's claim, and events marked (Mark). A row that cannot be decoded
// fails with errPoison.
//
// The mark is read here, after the claim: a failure that raced the claim
// on another replica (its transaction failed before the claim, its record
// written after) marks the event before it writes the record, so a record
// already in the table when this statement runs is marked and read.
func (q *Queue) load(ctx context.Context, batch []pend) (recs []events.Record, read []string, err error) {
	ids := make([]string, len(batch))
	for i, p := range batch {
		ids[i] = p.id
	}
	rows, err := q.pool.Query(ctx, `SELECT p.record, p.payload,
			NOT p.fresh OR EXISTS (SELECT 1 FROM event_records_prior m WHERE m.event_id = p.event_id)
		FROM event_records_pending p WHERE p.event_id = ANY($1)`, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("read pending event records: %w", err)
	}
	var meta, payload []byte
	var prior bool
	var bad error
	_, err = pgx.ForEachRow(rows, []any{&meta, &payload, &prior}, func() error {
		r, err := decode(meta, payload)
		if err != nil {
			bad = errors.Join(bad, err)
			return nil
		}
		recs = append(recs, r)
		if prior {
			read = append(read, r.ID)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read pending event records: %w", err)
	}
	if bad != nil {
		return nil, nil, fmt.Errorf("%w: %w", errPoison, bad)
	}
	return recs, read, nil
}

// writeBatch reads one batch's rows, writes them to the table, keeping the
// bookkeeping of an earlier failed delivery (first received_at and source,
// attempts + 1), and deletes the rows.
func (q *Queue) writeBatch(ctx context.Context, batch []pend) error {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	recs, read, err := q.load(ctx, batch)
	if err != nil {
		return err
	}
	ids := make([]string, len(batch))
	for i, p := range batch {
		ids[i] = p.id
	}
	if len(recs) > 0 {
		if err := q.put(ctx, recs, read); err != nil {
			return err
		}
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

// Quarantined counts the records the events table refused for good (in
// event_records_quarantined); the console's overview warns while there are
// any.
func (q *Queue) Quarantined(ctx context.Context) (int64, error) {
	var n int64
	if err := q.pool.QueryRow(ctx, `SELECT count(*) FROM event_records_quarantined`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count quarantined event records: %w", err)
	}
	return n, nil
}

// put writes recs to the table. Only the records that may have an earlier
// version (read) are read first: the strongly consistent read was ~30 % of
// DynamoDB Local's CPU. The others are written IfAbsent, since the marks
// can miss a failure (one recorded while Postgres was down, by an older
// replica, or racing this write after load); those the table refuses are
// read and written superseded like the rest. Every write goes
// through Table's PutProcessed, whose wrappers see them all.
func (q *Queue) put(ctx context.Context, recs []events.Record, read []string) error {
	mayExist := make(map[string]bool, len(read))
	for _, id := range read {
		mayExist[id] = true
	}
	var fresh, rest []events.Record
	for _, r := range recs {
		if mayExist[r.ID] {
			rest = append(rest, r)
			continue
		}
		r.IfAbsent = true
		fresh = append(fresh, r)
	}
	if len(fresh) > 0 {
		err := q.table.PutProcessed(ctx, fresh)
		var nw *events.NotWrittenError
		if errors.As(err, &nw) {
			for _, id := range nw.IDs {
				mayExist[id] = true
			}
			for _, r := range fresh {
				if mayExist[r.ID] {
					r.IfAbsent = false
					rest = append(rest, r)
				}
			}
		} else if err != nil {
			return err
		}
	}
	return q.supersede(ctx, rest)
}

// maxSupersede bounds the rounds of supersede.
const maxSupersede = 5

// errStillChanging: supersede gave up on records other replicas kept
// changing. The table answers, so it is not failing (Admit goes on); the
// batch is retried later.
var errStillChanging = errors.New("still changing")

// supersede reads the records of recs' events and writes recs over them
// (events.Supersede), each on the condition that the table still holds
// what was read: nothing (IfAbsent) or that record (IfUnchanged). A failure
// recorded by another replica between the read and the write (one more
// attempt) is thus never overwritten: the write is refused, and the record
// read and superseded again, up to maxSupersede rounds; after that the
// batch fails and its rows, still pending, are written later.
func (q *Queue) supersede(ctx context.Context, recs []events.Record) error {
	for round := 1; len(recs) > 0; round++ {
		ids := make([]string, 0, len(recs))
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		existing, err := q.table.BatchGet(ctx, ids)
		if err != nil {
			return err
		}
		put := make([]events.Record, 0, len(recs))
		for _, r := range recs {
			r.IfAbsent, r.IfUnchanged = false, nil
			if prev, ok := existing[r.ID]; ok {
				if events.Covers(prev, r) {
					continue // written before (a lost delete, another instance's sweep)
				}
				r = events.Supersede(prev, r)
				r.IfUnchanged = &prev
			} else {
				r.IfAbsent = true
			}
			put = append(put, r)
		}
		err = q.table.PutProcessed(ctx, put)
		var nw *events.NotWrittenError
		if !errors.As(err, &nw) {
			return err
		}
		if round == maxSupersede {
			return fmt.Errorf("supersede event records: %w after %d reads: %w", errStillChanging, round, err)
		}
		refused := make(map[string]bool, len(nw.IDs))
		for _, id := range nw.IDs {
			refused[id] = true
		}
		var again []events.Record // as loaded, to supersede afresh
		for _, r := range recs {
			if refused[r.ID] {
				again = append(again, r)
			}
		}
		recs = again
	}
	return nil
}

// quarantine moves p's row to event_records_quarantined (it stays readable
// through Lookup, listed in the console, counted) and takes it off the
// backlog. If the move fails, the record stays queued and is tried again.
func (q *Queue) quarantine(ctx context.Context, p pend, cause error) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	msg := cause.Error()
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	_, err := q.pool.Exec(ctx, `WITH moved AS (
			DELETE FROM event_records_pending WHERE event_id = $1 RETURNING event_id, record, payload, enqueued_at
		)
		INSERT INTO event_records_quarantined (event_id, record, payload, enqueued_at, tries, error)
		SELECT event_id, record, payload, enqueued_at, $2, $3 FROM moved
		ON CONFLICT (event_id) DO UPDATE SET tries = excluded.tries, error = excluded.error, quarantined_at = now()`,
		p.id, q.cfg.QuarantineAfter, msg)
	q.mu.Lock()
	defer q.mu.Unlock()
	if err != nil {
		q.cfg.Log.Error("could not quarantine an event record the table refuses; it stays queued", "event_id", p.id, "error", err)
		q.refused[p.id] = 0
		q.waiting = append(q.waiting, p)
		q.broadcast()
		return
	}
	q.forget(p.id)
	q.broadcast()
	q.observeBacklog()
	q.cfg.Log.Error("event record quarantined: the events table refused it for good; see docs/runbooks/StripePaymentsEventRecordsQuarantined.md",
		"event_id", p.id, "tries", q.cfg.QuarantineAfter, "error", cause)
	if o, ok := q.cfg.Observer.(QuarantineObserver); ok {
		o.RecordsQuarantined(1)
	}
}
