package incidents_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/failcause"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
)

const hour = time.Hour

// groupCounts is the kept count of every group (the table a read uses
// instead of the problem rows).
func groupCounts(t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT cause || '|' || event_type || '|' || stripe_account, n FROM incident_event_groups`)
	require.NoError(t, err)
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		require.NoError(t, rows.Scan(&k, &n))
		out[k] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// The problem list's writer classifies each event as it lists it and the
// group's count follows every write, move and removal; a read lists the
// kept groups with their newest samples and their first and last
// occurrence.
func TestIncidentsAreKeptAsProblemsAreWritten(t *testing.T) {
	s, pool, _ := newStore(t)
	ctx := context.Background()
	list := opsdata.NewProblems(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	rec := func(id string) events.Record {
		return events.Record{ID: id, Type: "payment_intent.succeeded", StripeAccount: "acct_K0000001"}
	}
	rejection := func(id string) string {
		return "apply event " + id + `: event object cannot be processed: payment intent id "` + id + `x" is not a PaymentIntent id`
	}
	// Ids of every shape: one cause, one incident.
	ids := []string{"evt_1Kept0000001", "evt-kept-2", "12345", "0f8fad5b-d9cb-469f-a165-70867728950e"}
	for _, id := range ids {
		list.Listed(ctx, rec(id), "rejected", rejection(id))
	}
	cause := failcause.OfEvent("rejected", rejection("evt_x"))
	key := cause + "|payment_intent.succeeded|acct_K0000001"
	assert.Equal(t, map[string]int64{key: 4}, groupCounts(t, pool))

	got, err := s.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, got, 1, "%+v", got)
	inc := got[0]
	assert.Equal(t, cause, inc.Cause)
	assert.EqualValues(t, 4, inc.Count)
	assert.Equal(t, []string{ids[3], ids[2], ids[1], ids[0]}, inc.SampleIDs, "newest first")
	assert.False(t, inc.FirstSeen.After(inc.LastSeen))

	// The same event fails again, now for another cause: it moves.
	list.Listed(ctx, rec(ids[0]), "failed", "Stripe unreachable: EOF")
	assert.Equal(t, map[string]int64{key: 3, "stripe_unreachable|payment_intent.succeeded|acct_K0000001": 1}, groupCounts(t, pool))
	// Listed again for the same cause: nothing moves.
	list.Listed(ctx, rec(ids[1]), "rejected", rejection(ids[1]))
	assert.Equal(t, map[string]int64{key: 3, "stripe_unreachable|payment_intent.succeeded|acct_K0000001": 1}, groupCounts(t, pool))
	// Taken off the list (processed at last): the group shrinks, then goes.
	require.NoError(t, list.Resolve(ctx, ids[0], ids[1]))
	assert.Equal(t, map[string]int64{key: 2}, groupCounts(t, pool))
	require.NoError(t, list.Resolve(ctx, ids[2], ids[3]))
	assert.Empty(t, groupCounts(t, pool))
	got, err = s.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, got)
}

// Rows listed before the causes were kept (or by an older classifier) are
// classified by the next read and counted from then on.
func TestUnclassifiedProblemsAreClassifiedByTheNextRead(t *testing.T) {
	s, pool, _ := newStore(t)
	ctx := context.Background()
	problem(t, pool, "evt_legacy0001", "failed", "invoice.paid", "acct_L0000001", "Stripe unreachable: EOF", t0.Add(-2*hour))
	problem(t, pool, "evt_legacy0002", "failed", "invoice.paid", "acct_L0000001", "Stripe unreachable: i/o timeout", t0.Add(-hour))
	_, err := pool.Exec(ctx, `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at, cause, cause_version)
		VALUES ('evt_oldclass01', 'failed', 'invoice.paid', 'acct_L0000001', 'Stripe unreachable: EOF', $1, 'some_old_class', 0)`, t0)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"some_old_class|invoice.paid|acct_L0000001": 1}, groupCounts(t, pool))

	got, err := s.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, got, 1, "%+v", got)
	assert.Equal(t, "stripe_unreachable", got[0].Cause)
	assert.EqualValues(t, 3, got[0].Count)
	assert.Equal(t, t0.Add(-2*hour), got[0].FirstSeen.UTC())
	assert.Equal(t, t0, got[0].LastSeen.UTC())
	assert.Equal(t, map[string]int64{"stripe_unreachable|invoice.paid|acct_L0000001": 3}, groupCounts(t, pool))
}

// Under concurrent writers (instances listing events and taking batches
// off the list at once) every count stays exact and no write fails
// (a deadlock would fail one).
func TestKeptCountsStayExactUnderConcurrentWriters(t *testing.T) {
	_, pool, _ := newStore(t)
	ctx := context.Background()
	var logged bytes.Buffer
	var logMu sync.Mutex
	list := opsdata.NewProblems(pool, slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &logMu}, nil)))
	causes := []string{"Stripe unreachable: EOF", "subscription sub_1X has 3 periods", "unknown purchase pur_1ABCDEFG"}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				id := fmt.Sprintf("evt_conc%02d", (w*7+i)%30) // writers share events
				outcome := []string{"failed", "rejected"}[i%2]
				list.Listed(ctx, events.Record{ID: id, Type: "invoice.paid", StripeAccount: fmt.Sprintf("acct_C%d", i%3)}, outcome, causes[(w+i)%3])
				if i%5 == 4 {
					if err := list.Resolve(ctx, fmt.Sprintf("evt_conc%02d", (w+i)%30), fmt.Sprintf("evt_conc%02d", (w*3+i)%30), fmt.Sprintf("evt_conc%02d", (i*7)%30)); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Empty(t, logged.String(), "no listing failed")

	rows, err := pool.Query(ctx, `SELECT cause || '|' || event_type || '|' || stripe_account, count(*) FROM ops_event_problems GROUP BY 1`)
	require.NoError(t, err)
	want := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		require.NoError(t, rows.Scan(&k, &n))
		want[k] = n
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, want, groupCounts(t, pool))
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
