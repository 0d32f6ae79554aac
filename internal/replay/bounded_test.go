package replay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/replay"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// problemReads counts the queries that read ops_event_problems.
type problemReads struct{ n atomic.Int64 }

func (c *problemReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM ops_event_problems") {
		c.n.Add(1)
	}
	return ctx
}

func (c *problemReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// tracedPool is a pool on pool's database whose problem reads are counted.
func tracedPool(t *testing.T, pool *pgxpool.Pool) (*pgxpool.Pool, *problemReads) {
	t.Helper()
	cfg := pool.Config()
	reads := &problemReads{}
	cfg.ConnConfig.Tracer = reads
	traced, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	return traced, reads
}

func insertProblem(t *testing.T, pool *pgxpool.Pool, id, typ, msg string, at time.Time) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at) VALUES ($1, 'failed', $2, 'acct_A0000001', $3, $4)`,
		id, typ, msg, at)
	require.NoError(t, err)
}

// items is a replay's items in order.
func items(t *testing.T, pool *pgxpool.Pool, id string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT event_id FROM replay_items WHERE replay_id = $1 ORDER BY seq`, id)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

// A match is read a page at a time (memory holds a page, never the whole
// match), and across pages it selects exactly what it did at once: every
// item once, oldest first, an incident's cause checked on every page
// (events of the same second ordered by id).
func TestAMatchIsReadPageByPage(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	traced, reads := tracedPool(t, pool)
	s := replay.NewStore(traced, incidents.New(pool, incidents.Config{})).WithLimits(4, replay.MaxItems)
	var all, timeouts []string
	for i := range 11 {
		id := fmt.Sprintf("evt_page%02d", i)
		msg := "context deadline exceeded"
		if i%3 == 1 {
			msg = "dynamodb: throttled"
		} else {
			timeouts = append(timeouts, id)
		}
		insertProblem(t, pool, id, "invoice.paid", msg, t0.Add(time.Duration(i/2)*time.Second))
		all = append(all, id)
	}

	p, err := s.DryRun(ctx, replay.Filter{Type: "invoice.paid"})
	require.NoError(t, err)
	assert.Equal(t, 11, p.Matched)
	require.Len(t, p.Sample, replay.SampleSize)
	for i, it := range p.Sample {
		assert.Equal(t, all[i], it.EventID)
	}
	assert.EqualValues(t, 3, reads.n.Load(), "11 rows in pages of 4: three reads")

	reads.n.Store(0)
	r, err := s.Start(ctx, replay.Filter{Type: "invoice.paid"}, "t")
	require.NoError(t, err)
	assert.Equal(t, 11, r.Matched)
	assert.Equal(t, all, items(t, pool, r.ID))
	assert.EqualValues(t, 3, reads.n.Load())
	got, err := s.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, 11, got.Matched)

	timeoutInc := incidents.ID(incidents.KindEvent, "timeout", "invoice.paid", "acct_A0000001")
	r, err = s.Start(ctx, replay.Filter{Incident: timeoutInc}, "t")
	require.NoError(t, err)
	assert.Equal(t, len(timeouts), r.Matched)
	assert.Equal(t, timeouts, items(t, pool, r.ID))
}

// A filter matching more than a replay takes is refused while it is read,
// and nothing is written: no replay, no item.
func TestAMatchOverTheCapIsRefusedAndWritesNothing(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	s := replay.NewStore(pool, incidents.New(pool, incidents.Config{})).WithLimits(3, 7)
	for i := range 8 {
		insertProblem(t, pool, fmt.Sprintf("evt_over%02d", i), "invoice.paid", "x", t0.Add(time.Duration(i)*time.Second))
	}
	_, err := s.Start(ctx, replay.Filter{Type: "invoice.paid"}, "t")
	require.ErrorIs(t, err, apperr.ErrInvalid)
	assert.Contains(t, err.Error(), "more than the 7 events")
	var replays, rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM replays`).Scan(&replays))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM replay_items`).Scan(&rows))
	assert.Zero(t, replays)
	assert.Zero(t, rows)

	// Seven fit.
	r, err := s.Start(ctx, replay.Filter{Type: "invoice.paid", Until: ptr(t0.Add(7 * time.Second))}, "t")
	require.NoError(t, err)
	assert.Equal(t, 7, r.Matched)
}

// At most MaxRunning replays run at once, also when they are asked for
// together: a further one is refused with a conflict and writes nothing;
// once one is cancelled (or done) there is room again.
func TestRunningReplaysAreCapped(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	s := replay.NewStore(pool, incidents.New(pool, incidents.Config{}))
	const asked = replay.MaxRunning + 3
	for i := range asked + 1 {
		insertProblem(t, pool, fmt.Sprintf("evt_cap%02d", i), fmt.Sprintf("type.n%02d", i), "x", t0.Add(time.Duration(i)*time.Second))
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		started   []string
		conflicts int
	)
	for i := range asked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.Start(ctx, replay.Filter{Type: fmt.Sprintf("type.n%02d", i)}, "t")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				assert.ErrorIs(t, err, apperr.ErrConflict)
				assert.Contains(t, err.Error(), fmt.Sprintf("%d replays are running", replay.MaxRunning))
				conflicts++
				return
			}
			started = append(started, r.ID)
		}()
	}
	wg.Wait()
	require.Len(t, started, replay.MaxRunning)
	assert.Equal(t, asked-replay.MaxRunning, conflicts)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM replays`).Scan(&n))
	assert.Equal(t, replay.MaxRunning, n, "a refused replay writes nothing")

	_, err := s.Cancel(ctx, started[0], "t")
	require.NoError(t, err)
	_, err = s.Start(ctx, replay.Filter{Type: fmt.Sprintf("type.n%02d", asked)}, "t")
	require.NoError(t, err, "a cancelled replay makes room")

	_, err = s.DryRun(ctx, replay.Filter{Type: "type.n00"})
	require.NoError(t, err, "a dry run is never refused for the cap")
}
