package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// Dead-lettering: after MaxAttempts failed deliveries, or on a failure once
// the message is MaxAge old; never before. An ERROR line names the message
// but not its payload; OnDead counts it once; no worker tries it again.
func TestDeadLetter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name        string
		maxAttempts int
		maxAge      time.Duration
		step        time.Duration // clock advance between attempts
		wantTries   int
	}{
		{name: "after N attempts", maxAttempts: 3, step: time.Hour, wantTries: 3},
		{name: "after max age", maxAttempts: 100, maxAge: 90 * time.Minute, step: time.Hour, wantTries: 3}, // fails at 0h, 1h, 2h
		{name: "one attempt", maxAttempts: 1, step: time.Hour, wantTries: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pool := testenv.Postgres(t)
			ctx := context.Background()
			ids := enqueue(t, pool, "action", 1, t0)
			now := t0
			var logs bytes.Buffer
			tries, dead := 0, 0
			w := &outbox.Worker{Pool: pool, Topic: "action", Log: slog.New(slog.NewJSONHandler(&logs, nil)),
				MaxAttempts: tc.maxAttempts, MaxAge: tc.maxAge, Now: func() time.Time { return now },
				OnDead: func(topic string) { assert.Equal(t, "action", topic); dead++ },
				Deliver: func(context.Context, outbox.Message) error {
					tries++
					return errors.New("receiver answered 500")
				}}
			for range tc.wantTries + 3 {
				_, err := w.DeliverDue(ctx)
				require.NoError(t, err)
				now = now.Add(tc.step)
			}
			assert.Equal(t, tc.wantTries, tries)
			assert.Equal(t, 1, dead)
			n, err := outbox.Pending(ctx, pool, "action")
			require.NoError(t, err)
			assert.Zero(t, n, "a dead letter is not pending")

			list, next, err := outbox.NewStore(pool, quiet, nil).ListDead(ctx, "", outbox.DeadCursor{}, 10)
			require.NoError(t, err)
			assert.Nil(t, next)
			require.Len(t, list, 1)
			assert.Equal(t, ids[0], list[0].ID)
			assert.Equal(t, tc.wantTries, list[0].Attempts)
			assert.Equal(t, "receiver answered 500", list[0].LastError)

			var errorLines []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, `"level":"ERROR"`) {
					errorLines = append(errorLines, line)
				}
			}
			require.Len(t, errorLines, 1)
			assert.Contains(t, errorLines[0], ids[0].String())
			assert.Contains(t, errorLines[0], "dead-lettered")
			assert.NotContains(t, logs.String(), "secret-payload-value")
		})
	}
}

// A message whose leases expired without a result (the worker crashed or
// hung each time) is dead-lettered at its next claim once its limits are
// reached, not tried again.
func TestPoisonMessageIsDeadLetteredWithoutAnotherTry(t *testing.T) {
	const lease = time.Hour
	cases := []struct {
		name        string
		maxAttempts int
		maxAge      time.Duration
		crashes     int
	}{
		{name: "attempts used up by crashes", maxAttempts: 2, crashes: 2},
		{name: "too old after a crash", maxAttempts: 100, maxAge: lease, crashes: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pool := testenv.Postgres(t)
			ctx := context.Background()
			t0 := time.Now()
			enqueue(t, pool, "action", 1, t0)
			now := t0
			hang := make(chan struct{})
			var hung sync.WaitGroup
			defer hung.Wait()
			defer close(hang)
			for range tc.crashes {
				entered := make(chan struct{})
				crashed := &outbox.Worker{Pool: pool, Topic: "action", Log: quiet, Lease: lease,
					MaxAttempts: tc.maxAttempts, MaxAge: tc.maxAge, Now: func() time.Time { return now },
					Deliver: func(context.Context, outbox.Message) error { close(entered); <-hang; return nil }}
				hung.Add(1)
				go func() { defer hung.Done(); _, _ = crashed.DeliverDue(ctx) }()
				<-entered
				now = now.Add(lease + time.Second)
			}
			tried, dead := false, 0
			w := &outbox.Worker{Pool: pool, Topic: "action", Log: quiet, Lease: lease,
				MaxAttempts: tc.maxAttempts, MaxAge: tc.maxAge, Now: func() time.Time { return now },
				OnDead:  func(string) { dead++ },
				Deliver: func(context.Context, outbox.Message) error { tried = true; return nil }}
			n, err := w.DeliverDue(ctx)
			require.NoError(t, err)
			assert.Equal(t, 1, n)
			assert.False(t, tried)
			assert.Equal(t, 1, dead)
		})
	}
}

// A re-drive makes a dead letter due again with the same id, and the next
// worker pass delivers it exactly once; its attempts and age start afresh.
// Re-driving what is not dead changes nothing.
func TestRedriveDeliversOnce(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	t0 := time.Now().Add(-48 * time.Hour)
	ids := enqueue(t, pool, "action", 2, t0)
	store := outbox.NewStore(pool, quiet, nil)
	up := false
	got := map[uuid.UUID]int{}
	w := &outbox.Worker{Pool: pool, Topic: "action", Log: quiet, MaxAttempts: 5, MaxAge: 24 * time.Hour,
		Deliver: func(_ context.Context, m outbox.Message) error {
			if !up {
				return errors.New("receiver down")
			}
			got[m.ID]++
			return nil
		}}
	_, err := w.DeliverDue(ctx) // both are older than MaxAge: one failure each makes them dead
	require.NoError(t, err)
	st, err := store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, []outbox.TopicStats{{Topic: "action", Dead: 2}}, st)

	assert.ErrorIs(t, store.Redrive(ctx, uuid.New()), apperr.ErrNotFound)
	require.NoError(t, store.Redrive(ctx, ids[0]))
	assert.ErrorIs(t, store.Redrive(ctx, ids[0]), apperr.ErrConflict, "already re-driven")
	up = true
	for range 3 {
		_, err = w.DeliverDue(ctx)
		require.NoError(t, err)
	}
	assert.Equal(t, map[uuid.UUID]int{ids[0]: 1}, got)
	assert.ErrorIs(t, store.Redrive(ctx, ids[0]), apperr.ErrConflict, "delivered")

	// Many at once: unknown and delivered ids are skipped.
	redriven, err := store.RedriveMany(ctx, []uuid.UUID{ids[0], ids[1], uuid.New()})
	require.NoError(t, err)
	assert.Equal(t, []uuid.UUID{ids[1]}, redriven)
	_, err = w.DeliverDue(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[uuid.UUID]int{ids[0]: 1, ids[1]: 1}, got)
	st, err = store.Stats(ctx)
	require.NoError(t, err)
	assert.Empty(t, st)
}

// Stats report the backlog per topic and its oldest age; ListDead pages
// newest first and filters by topic; RedriveTopic re-drives one topic only.
func TestStatsListAndRedriveTopic(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	enqueue(t, pool, "email", 2, now.Add(-10*time.Minute))
	enqueue(t, pool, "email", 1, now.Add(-time.Minute))
	deadIDs := enqueue(t, pool, "action", 5, now.Add(-time.Hour))
	enqueue(t, pool, "billing", 1, now.Add(-time.Hour))
	// Dead-letter the actions one by one, a second apart.
	clock := now
	w := &outbox.Worker{Pool: pool, Topic: "action", Log: quiet, MaxAttempts: 1, Batch: 1,
		Now:     func() time.Time { return clock },
		Deliver: func(context.Context, outbox.Message) error { return errors.New("no") }}
	for range 5 {
		_, err := w.DeliverDue(ctx)
		require.NoError(t, err)
		clock = clock.Add(time.Second)
	}
	store := outbox.NewStore(pool, quiet, func() time.Time { return now })
	st, err := store.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, []outbox.TopicStats{
		{Topic: "action", Dead: 5},
		{Topic: "billing", Pending: 1, OldestPending: time.Hour},
		{Topic: "email", Pending: 3, OldestPending: 10 * time.Minute},
	}, st)

	var seen []uuid.UUID
	cursor := outbox.DeadCursor{}
	for page := 0; ; page++ {
		list, next, err := store.ListDead(ctx, "action", cursor, 2)
		require.NoError(t, err)
		for _, d := range list {
			seen = append(seen, d.ID)
		}
		if next == nil {
			break
		}
		cursor = *next
		require.Less(t, page, 5)
	}
	want := append([]uuid.UUID(nil), deadIDs...)
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}
	assert.Equal(t, want, seen, "newest dead first, each once")
	list, _, err := store.ListDead(ctx, "email", outbox.DeadCursor{}, 10)
	require.NoError(t, err)
	assert.Empty(t, list)

	ids, err := store.RedriveTopic(ctx, "email")
	require.NoError(t, err)
	assert.Empty(t, ids)
	ids, err = store.RedriveTopic(ctx, "action")
	require.NoError(t, err)
	assert.ElementsMatch(t, deadIDs, ids)
}

// Pruning deletes delivered messages older than the retention, in batches,
// and nothing else: not newer deliveries, not pending messages, not dead
// letters however old.
func TestPruneDeliveredRemovesOnlyRowsPastRetention(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	old := now.Add(-40 * 24 * time.Hour)
	oldDelivered := enqueue(t, pool, "action", 7, old)
	recentDelivered := enqueue(t, pool, "action", 2, old)
	pending := enqueue(t, pool, "billing", 2, old)
	dead := enqueue(t, pool, "email", 1, old)
	exec := func(sql string, args ...any) {
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`UPDATE outbox SET delivered_at = $2 WHERE id = ANY($1)`, oldDelivered, now.Add(-31*24*time.Hour))
	exec(`UPDATE outbox SET delivered_at = $2 WHERE id = ANY($1)`, recentDelivered, now.Add(-29*24*time.Hour))
	exec(`UPDATE outbox SET dead_at = $2 WHERE id = ANY($1)`, dead, old)

	store := outbox.NewStore(pool, quiet, func() time.Time { return now })
	n, err := store.PruneDelivered(ctx, 30*24*time.Hour, 3)
	require.NoError(t, err)
	assert.EqualValues(t, 7, n)
	rows, err := pool.Query(ctx, `SELECT id FROM outbox`)
	require.NoError(t, err)
	var left []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		left = append(left, id)
	}
	require.NoError(t, rows.Err())
	assert.ElementsMatch(t, append(append(recentDelivered, pending...), dead...), left)

	_, err = store.PruneDelivered(ctx, 0, 3)
	assert.Error(t, err, "a zero retention is refused")
}

// A consumer that panics fails its attempt instead of killing the worker;
// the message reaches its limit and becomes a dead letter.
func TestPanickingConsumerFailsTheAttempt(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	enqueue(t, pool, "email", 1, time.Now())
	now := time.Now()
	tries := 0
	w := &outbox.Worker{Pool: pool, Topic: "email", Log: quiet, MaxAttempts: 2, Now: func() time.Time { return now },
		Deliver: func(context.Context, outbox.Message) error { tries++; panic("bad template") }}
	for range 3 {
		_, err := w.DeliverDue(ctx)
		require.NoError(t, err)
		now = now.Add(time.Hour)
	}
	assert.Equal(t, 2, tries)
	list, _, err := outbox.NewStore(pool, quiet, nil).ListDead(ctx, "email", outbox.DeadCursor{}, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Contains(t, list[0].LastError, "consumer panicked: bad template")
}
