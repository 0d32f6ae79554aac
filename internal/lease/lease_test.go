package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/lease"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// jobs is a fresh jobs table in this test's database.
func jobs(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testenv.Postgres(t)
	_, err := pool.Exec(context.Background(), `CREATE TABLE lease_jobs (id text PRIMARY KEY, status text NOT NULL,
		lease_owner text, leased_until timestamptz, created_at timestamptz NOT NULL)`)
	require.NoError(t, err)
	return pool
}

type row struct {
	id, status, owner string
	leased            time.Duration // leased_until - now (0: NULL)
	age               time.Duration // now - created_at
}

func insert(t *testing.T, pool *pgxpool.Pool, rows ...row) {
	t.Helper()
	for _, r := range rows {
		var owner, until any
		if r.owner != "" {
			owner = r.owner
		}
		if r.leased != 0 {
			until = r.leased.String()
		}
		_, err := pool.Exec(context.Background(), `INSERT INTO lease_jobs VALUES ($1, $2, $3, now() + $4::interval, now() - $5::interval)`,
			r.id, r.status, owner, until, r.age.String())
		require.NoError(t, err)
	}
}

func owner(t *testing.T, pool *pgxpool.Pool, id string) string {
	t.Helper()
	var o *string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT lease_owner FROM lease_jobs WHERE id = $1`, id).Scan(&o))
	if o == nil {
		return ""
	}
	return *o
}

// Claim takes the oldest running job whose lease is free or ran out, and
// nothing else.
func TestClaimTakesTheOldestFreeRunningJob(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		rows []row
		want string
	}{
		{"none", nil, ""},
		{"the oldest of two free", []row{{id: "new", status: "running", age: time.Minute}, {id: "old", status: "running", age: time.Hour}}, "old"},
		{"not a held one", []row{{id: "held", status: "running", owner: "other", leased: time.Hour, age: time.Hour}, {id: "free", status: "running", age: time.Minute}}, "free"},
		{"an expired lease is free", []row{{id: "expired", status: "running", owner: "gone", leased: -time.Second, age: time.Hour}}, "expired"},
		{"not a done one", []row{{id: "done", status: "done", age: time.Hour}}, ""},
		{"only held ones", []row{{id: "held", status: "running", owner: "other", leased: time.Hour, age: time.Hour}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := jobs(t)
			insert(t, pool, c.rows...)
			r := lease.New(pool, lease.Config{Table: "lease_jobs", What: "job"})
			id, err := r.Claim(context.Background())
			require.NoError(t, err)
			assert.Equal(t, c.want, id)
			if id != "" {
				assert.Equal(t, r.Owner(), owner(t, pool, id))
			}
		})
	}
}

// A job is one runner's until its lease runs out without a renewal; then
// another takes it over and the first one's renewal fails.
func TestALeaseIsOneRunnersUntilItRunsOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := jobs(t)
	insert(t, pool, row{id: "j1", status: "running", age: time.Minute})
	a := lease.New(pool, lease.Config{Table: "lease_jobs", What: "job", Lease: 300 * time.Millisecond})
	b := lease.New(pool, lease.Config{Table: "lease_jobs", What: "job", Lease: time.Minute})
	require.NotEqual(t, a.Owner(), b.Owner())

	id, err := a.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, "j1", id)
	got, err := b.Claim(ctx)
	require.NoError(t, err)
	assert.Empty(t, got, "held by a")
	held, err := a.Renew(ctx, pool, id) // a heartbeat
	require.NoError(t, err)
	assert.True(t, held)
	held, err = b.Renew(ctx, pool, id)
	require.NoError(t, err)
	assert.False(t, held, "b does not hold it")

	time.Sleep(500 * time.Millisecond) // a stops recording: its lease runs out
	got, err = b.Claim(ctx)
	require.NoError(t, err)
	assert.Equal(t, "j1", got, "taken over")
	held, err = a.Renew(ctx, pool, id)
	require.NoError(t, err)
	assert.False(t, held, "a lost it")
	assert.Equal(t, b.Owner(), owner(t, pool, id))
}

// Renew holds a running job of its owner only.
func TestRenewHoldsARunningJobOfItsOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := jobs(t)
	r := lease.New(pool, lease.Config{Table: "lease_jobs", What: "job"})
	insert(t, pool,
		row{id: "mine", status: "running", owner: r.Owner(), leased: time.Minute},
		row{id: "theirs", status: "running", owner: "other", leased: time.Minute},
		row{id: "done", status: "done", owner: r.Owner(), leased: time.Minute})
	for id, want := range map[string]bool{"mine": true, "theirs": false, "done": false, "missing": false} {
		held, err := r.Renew(ctx, pool, id)
		require.NoError(t, err, id)
		assert.Equal(t, want, held, id)
	}
}

// Run works while once finds work, waits for a nudge or the poll when idle,
// logs an error and waits, and returns when ctx ends.
func TestRunWorksWhileThereIsWorkAndStopsOnCtx(t *testing.T) {
	t.Parallel()
	r := lease.New(jobs(t), lease.Config{Table: "lease_jobs", What: "job", Poll: time.Hour})
	var calls, idles atomic.Int32
	work := make(chan int, 10) // a job per value (negative: one that fails)
	once := func(ctx context.Context) (bool, error) {
		calls.Add(1)
		select {
		case left := <-work:
			if left < 0 {
				return true, errors.New("a failed job")
			}
			return true, nil
		default:
			return false, nil
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, once, func(context.Context) { idles.Add(1) })
	}()
	require.Eventually(t, func() bool { return calls.Load() == 1 && idles.Load() == 1 }, 5*time.Second, 10*time.Millisecond, "one look, then idle")

	work <- 1
	work <- 1
	r.Nudge()
	require.Eventually(t, func() bool { return calls.Load() == 4 && idles.Load() == 2 }, 5*time.Second, 10*time.Millisecond,
		"a nudge: two jobs and a look that found none, without waiting for the poll")

	work <- -1
	work <- 1
	r.Nudge()
	require.Eventually(t, func() bool { return idles.Load() == 3 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, int32(5), calls.Load(), "an error stops the run of work until the next wake")

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when ctx ended")
	}
}

func TestNewRefusesATableNameThatIsNotAnIdentifier(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "jobs; DROP TABLE x", "Jobs", "a b"} {
		assert.Panics(t, func() { lease.New(nil, lease.Config{Table: name}) }, name)
	}
	assert.NotPanics(t, func() { lease.New(nil, lease.Config{Table: "billing_batches"}) })
}
