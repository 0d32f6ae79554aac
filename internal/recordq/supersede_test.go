package recordq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// failingAfterRead is the events table where, for the first races reads
// of the event's record by the writer, another replica records one more
// failure of the event after the read (before the writer's put).
type failingAfterRead struct {
	*events.Store
	failed events.Record
	mu     *sync.Mutex
	races  *int
	reads  *int
}

func (f failingAfterRead) BatchGet(ctx context.Context, ids []string) (map[string]events.Record, error) {
	found, err := f.Store.BatchGet(ctx, ids)
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.reads++
	if err == nil && *f.races > 0 {
		*f.races--
		if ferr := f.Store.RecordFailure(ctx, f.failed, errors.New("transition refused")); ferr != nil {
			return nil, ferr
		}
	}
	return found, err
}

// errorsSeen is an Observer keeping the batches' errors.
type errorsSeen struct {
	mu   sync.Mutex
	errs []error
}

func (o *errorsSeen) RecordsWritten(_ int, _ time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.errs = append(o.errs, err)
	}
}

func (o *errorsSeen) RecordBacklog(int) {}

func (o *errorsSeen) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.errs)
}

// docs/design.md §5 (bookkeeping): failures recorded by
// other replicas between the writer's read of an event's record and its
// put are superseded, never overwritten: every attempt is counted. While
// they keep coming the writer gives up the batch after a few reads (its
// row stays pending, nothing lost) and writes it on a later try.
func TestFailuresRecordedBetweenTheReadAndThePutAreAllCounted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		races   int
		givesUp int // batches given up
	}{
		{name: "one failure", races: 1},
		{name: "a failure after each of five reads", races: 5, givesUp: 1},
		{name: "failures after twelve reads", races: 12, givesUp: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			r := record(t)
			failed := r
			failed.Status, failed.ProcessedAt, failed.Source = events.StatusReceived, time.Time{}, stripeevent.SourcePoller
			failed.ReceivedAt = r.ReceivedAt.Add(-time.Minute)
			require.NoError(t, e.table.RecordFailure(ctx, failed, errors.New("transition refused")))

			races, reads := tc.races, 0
			seen := &errorsSeen{}
			table := failingAfterRead{Store: e.table, failed: failed, mu: &sync.Mutex{}, races: &races, reads: &reads}
			q := recordq.New(e.pool, table, recordq.Config{Observer: seen})
			commit(t, e, q, r) // not claimed: read first
			q.Hand([]events.Record{r})
			run(t, q)
			if tc.givesUp > 0 {
				// Given up on a record others keep changing, the writer
				// does not take the table for failing: deliveries go on.
				deadline := time.Now().Add(20 * time.Second)
				for seen.count() == 0 {
					require.True(t, time.Now().Before(deadline), "the writer never gave up")
					time.Sleep(time.Millisecond)
				}
				require.NoError(t, q.Admit(ctx))
			}
			flush(t, q)

			got, err := e.table.Get(ctx, r.ID)
			require.NoError(t, err)
			assert.Equal(t, events.StatusProcessed, got.Status)
			assert.Empty(t, got.LastError)
			assert.Equal(t, 1+tc.races+1, got.Attempts, "every failure and the success counted")
			assert.Equal(t, stripeevent.SourcePoller, got.Source, "the first failure's source kept")
			assert.Zero(t, e.pendingRows(t))
			assert.Equal(t, tc.races+1, reads, "read again after each refused put")
			seen.mu.Lock()
			defer seen.mu.Unlock()
			require.Len(t, seen.errs, tc.givesUp)
			for _, err := range seen.errs {
				assert.ErrorContains(t, err, "still changing after 5 reads")
			}
		})
	}
}
