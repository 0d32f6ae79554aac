package thin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// RecordTable is the events table a Recorder writes to.
type RecordTable interface {
	PutReceived(ctx context.Context, r events.Record) error
}

// Recorder writes queued thin notifications' records (status received,
// payload_kind thin) to the events table behind the answer, and until it
// has, reads them from the queue: it is an events.Pending, so the internal
// API finds a notification as soon as its queue row is committed. The
// answer thus waits for one Postgres commit, as a snapshot event's does,
// instead of a conditional PutItem and a Postgres insert.
type Recorder struct {
	Queue           *Queue
	Table           RecordTable
	PlatformAccount string
	EventTTL        time.Duration
}

// recordOf is the events-table record of a queued job.
func (r *Recorder) recordOf(j Job) (events.Record, error) {
	t, err := stripeevent.ParseThin(j.Payload)
	if err != nil {
		return events.Record{}, fmt.Errorf("queued thin event %s: %w", j.EventID, err)
	}
	return events.NewThinRecord(t, j.Payload, r.PlatformAccount, r.EventTTL, stripeevent.Source(j.Source), j.ReceivedAt), nil
}

// write puts the records of jobs (conditionally: a record already there,
// perhaps processed, is left alone) and marks them recorded.
func (r *Recorder) write(ctx context.Context, jobs []Job) error {
	var (
		mu   sync.Mutex
		ok   []string
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, 4) // a few at a time: the table also serves the answers
	for _, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rec, err := r.recordOf(j)
			if err == nil {
				err = r.Table.PutReceived(ctx, rec)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && !errors.Is(err, events.ErrDuplicate) {
				errs = append(errs, err)
				return
			}
			ok = append(ok, j.EventID)
		})
	}
	wg.Wait()
	if len(ok) > 0 {
		if err := r.Queue.MarkRecorded(ctx, ok); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RecordPending writes up to n records not yet in the events table and
// returns how many it found.
func (r *Recorder) RecordPending(ctx context.Context, n int) (int, error) {
	jobs, err := r.Queue.Unrecorded(ctx, n, nil)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	return len(jobs), r.write(ctx, jobs)
}

// Lookup implements events.Pending: the records of ids still only queued.
func (r *Recorder) Lookup(ctx context.Context, ids []string) (map[string]events.Record, error) {
	jobs, err := r.Queue.Unrecorded(ctx, len(ids), ids)
	if err != nil {
		return nil, err
	}
	found := make(map[string]events.Record, len(jobs))
	for _, j := range jobs {
		rec, err := r.recordOf(j)
		if err != nil {
			return nil, err
		}
		found[rec.ID] = rec
	}
	return found, nil
}

// Settled implements events.Pending: the records of every notification
// queued before the call are written (by this call if need be), so an
// index listing after a 200 shows them. Usually one indexed query finding
// nothing.
func (r *Recorder) Settled(ctx context.Context) error {
	const page = 100
	for {
		n, err := r.RecordPending(ctx, page)
		if err != nil {
			return fmt.Errorf("record queued thin events: %w", err)
		}
		if n < page {
			return nil
		}
	}
}
