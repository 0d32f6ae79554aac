package replay_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/replay"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func ptr(t time.Time) *time.Time { return &t }

// The filter selects exactly the listed events it names.
func TestFilterMatches(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	inc := incidents.New(pool, incidents.Config{})
	s := replay.NewStore(pool, inc)
	rows := []struct{ id, outcome, typ, account, msg string }{
		{"evt_a1", "failed", "invoice.paid", "acct_A0000001", "context deadline exceeded"},
		{"evt_a2", "failed", "invoice.paid", "acct_A0000001", "dynamodb: throttled"},
		{"evt_a3", "rejected", "invoice.paid", "acct_A0000001", "context deadline exceeded"},
		{"evt_b1", "failed", "charge.refunded", "acct_B0000001", "context deadline exceeded"},
	}
	for i, r := range rows {
		_, err := pool.Exec(ctx, `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at) VALUES ($1, $2, $3, $4, $5, $6)`,
			r.id, r.outcome, r.typ, r.account, r.msg, t0.Add(time.Duration(i)*time.Minute))
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO processed_events (event_id, event_type, stripe_account, event_created) VALUES ('evt_a3', 'invoice.paid', 'acct_A0000001', now())`)
	require.NoError(t, err)
	timeoutInc := incidents.ID(incidents.KindEvent, "timeout", "invoice.paid", "acct_A0000001")
	cases := []struct {
		name   string
		f      replay.Filter
		want   []string
		refuse string
	}{
		{name: "incident: its cause, type and account only", f: replay.Filter{Incident: timeoutInc}, want: []string{"evt_a1"}},
		{name: "status", f: replay.Filter{Status: "rejected"}, want: []string{"evt_a3"}},
		{name: "type and account", f: replay.Filter{Type: "invoice.paid", StripeAccount: "acct_A0000001"}, want: []string{"evt_a1", "evt_a2", "evt_a3"}},
		{name: "time range [since, until)", f: replay.Filter{Since: ptr(t0.Add(time.Minute)), Until: ptr(t0.Add(3 * time.Minute))}, want: []string{"evt_a2", "evt_a3"}},
		{name: "incident and another account: nothing", f: replay.Filter{Incident: timeoutInc, StripeAccount: "acct_B0000001"}, want: []string{}},
		{name: "empty", f: replay.Filter{}, refuse: "empty filter"},
		{name: "unknown incident", f: replay.Filter{Incident: "inc_00000000000000000000"}, refuse: "no incident"},
		{name: "bad status", f: replay.Filter{Status: "processed"}, refuse: "status"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.DryRun(ctx, tc.f)
			if tc.refuse != "" {
				require.ErrorIs(t, err, apperr.ErrInvalid)
				assert.Contains(t, err.Error(), tc.refuse)
				return
			}
			require.NoError(t, err)
			got := []string{}
			for _, it := range p.Sample {
				got = append(got, it.EventID)
				want := "apply"
				if it.EventID == "evt_a3" {
					want = "duplicate"
				}
				assert.Equal(t, want, it.Would, it.EventID)
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, len(tc.want), p.Matched)
		})
	}
	_, err = s.Start(ctx, replay.Filter{Type: "customer.created"}, "t")
	assert.ErrorIs(t, err, apperr.ErrInvalid, "a replay matching nothing is refused")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM replays`).Scan(&n))
	assert.Zero(t, n, "dry runs and refusals write nothing")
}

type countingReplayer struct {
	mu      sync.Mutex
	calls   map[string]int
	classes map[stripebudget.Class]int
}

func (c *countingReplayer) Replay(ctx context.Context, id, _ string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[id]++
	c.classes[stripebudget.ClassOf(ctx, stripebudget.Charges)]++
	if id == "evt_bad" {
		return "", errors.New("event evt_bad could not be processed")
	}
	return "applied", nil
}

// The runner re-drives each item once, its Stripe requests at the budget's bulk class,
// counts failures, and two runners never share a replay.
func TestRunnerDrawsTheBulkBudgetAndCounts(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	s := replay.NewStore(pool, incidents.New(pool, incidents.Config{}))
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("evt_ok%02d", i)
		if i == 7 {
			id = "evt_bad"
		}
		_, err := pool.Exec(ctx, `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at) VALUES ($1, 'failed', 'invoice.paid', 'acct_A0000001', 'x', $2)`,
			id, t0.Add(time.Duration(i)*time.Second))
		require.NoError(t, err)
	}
	r, err := s.Start(ctx, replay.Filter{Type: "invoice.paid"}, "t")
	require.NoError(t, err)
	rep := &countingReplayer{calls: map[string]int{}, classes: map[stripebudget.Class]int{}}
	a := replay.NewRunner(s, rep, replay.RunnerConfig{})
	b := replay.NewRunner(s, rep, replay.RunnerConfig{})
	var wg sync.WaitGroup
	var worked [2]bool
	for i, runner := range []*replay.Runner{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := runner.RunOnce(ctx)
			assert.NoError(t, err)
			worked[i] = w
		}()
	}
	wg.Wait()
	assert.True(t, worked[0] != worked[1], "exactly one runner takes the replay")
	got, err := s.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, replay.StatusDone, got.Status)
	assert.Equal(t, 20, got.Done)
	assert.Equal(t, 19, got.Applied)
	assert.Equal(t, 1, got.Failed)
	assert.Len(t, rep.calls, 20)
	for id, n := range rep.calls {
		assert.Equal(t, 1, n, id)
	}
	assert.Equal(t, map[stripebudget.Class]int{stripebudget.Background: 20}, rep.classes, "every re-drive's Stripe requests go at the bulk class")
}

// A delivery incident's dead letters are re-driven through the outbox, each
// once; one delivered meanwhile is left alone.
func TestDeadLettersOfAnIncidentAreRedriven(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	inc := incidents.New(pool, incidents.Config{})
	s := replay.NewStore(pool, inc)
	ids := make([]uuid.UUID, 4)
	for i := range ids {
		ids[i] = uuid.New()
		lastErr := "receiver answered 500"
		if i == 3 {
			lastErr = "context deadline exceeded" // another cause: another incident
		}
		_, err := pool.Exec(ctx, `INSERT INTO outbox (id, topic, type, dedupe_key, payload, attempts, last_error, dead_at)
			VALUES ($1, 'actions', 'purchase.completed', $2, '{}', 8, $3, $4)`, ids[i], ids[i].String(), lastErr, t0.Add(time.Duration(i)*time.Minute))
		require.NoError(t, err)
	}
	id := incidents.ID(incidents.KindDelivery, "other:receiver answered <n>", "actions/purchase.completed", "")
	p, err := s.DryRun(ctx, replay.Filter{Incident: id})
	require.NoError(t, err)
	require.Equal(t, 3, p.Matched)
	assert.Equal(t, "redrive", p.Sample[0].Would)
	_, err = s.DryRun(ctx, replay.Filter{Incident: id, Type: "invoice.paid"})
	assert.ErrorIs(t, err, apperr.ErrInvalid)

	r, err := s.Start(ctx, replay.Filter{Incident: id}, "t")
	require.NoError(t, err)
	// One is delivered by hand before the runner gets to it.
	_, err = pool.Exec(ctx, `UPDATE outbox SET dead_at = NULL, delivered_at = now() WHERE id = $1`, ids[1])
	require.NoError(t, err)
	ob := outbox.NewStore(pool, nil, nil)
	runner := replay.NewRunner(s, &countingReplayer{calls: map[string]int{}, classes: map[stripebudget.Class]int{}},
		replay.RunnerConfig{Redriver: ob, NotDead: func(err error) bool { return errors.Is(err, apperr.ErrConflict) }})
	worked, err := runner.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, worked)
	got, err := s.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, replay.StatusDone, got.Status)
	assert.Equal(t, 3, got.Done)
	assert.Equal(t, 2, got.Applied, "two re-driven, the delivered one left alone")
	assert.Equal(t, 0, got.Failed)
	for i, want := range []struct {
		dead     bool
		redrives int
	}{{false, 1}, {false, 0}, {false, 1}, {true, 0}} {
		var dead bool
		var redrives int
		require.NoError(t, pool.QueryRow(ctx, `SELECT dead_at IS NOT NULL, redrives FROM outbox WHERE id = $1`, ids[i]).Scan(&dead, &redrives))
		assert.Equal(t, want.dead, dead, "message %d", i)
		assert.Equal(t, want.redrives, redrives, "message %d", i)
	}
}

// Dead letters selected by a filter (status dead, topic/type, dead_at
// range) rather than an incident: the dry run forecasts a re-drive and
// changes nothing; the replay re-drives exactly those; a filter mixing dead
// letters with what only events have is refused.
func TestDeadLettersByFilter(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	s := replay.NewStore(pool, incidents.New(pool, incidents.Config{}))
	type msg struct {
		topic, typ string
		deadAt     time.Time
		want       bool
	}
	msgs := []msg{
		{"action", "purchase.fulfilled", t0, true},
		{"action", "purchase.fulfilled", t0.Add(time.Minute), true},
		{"action", "purchase.fulfilled", t0.Add(-time.Hour), false}, // before since
		{"action", "refund.issued", t0, false},                      // another type
		{"email", "purchase.fulfilled", t0, false},                  // another topic
	}
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		ids[i] = uuid.New()
		_, err := pool.Exec(ctx, `INSERT INTO outbox (id, topic, type, dedupe_key, payload, attempts, last_error, dead_at)
			VALUES ($1, $2, $3, $4, '{}', 8, 'receiver answered 500', $5)`, ids[i], m.topic, m.typ, ids[i].String(), m.deadAt)
		require.NoError(t, err)
	}
	f := replay.Filter{Status: replay.StatusDead, Type: "action/purchase.fulfilled", Since: ptr(t0.Add(-time.Minute))}
	p, err := s.DryRun(ctx, f)
	require.NoError(t, err)
	require.Equal(t, 2, p.Matched)
	assert.Equal(t, ids[0].String(), p.Sample[0].EventID)
	assert.Equal(t, "redrive", p.Sample[0].Would)
	var redrives int
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(redrives), 0) FROM outbox`).Scan(&redrives))
	assert.Zero(t, redrives, "a dry run changes nothing")

	for _, bad := range []replay.Filter{
		{Status: replay.StatusDead, StripeAccount: "acct_A0000001"},
		{Status: "delivered"},
	} {
		_, err := s.DryRun(ctx, bad)
		assert.ErrorIs(t, err, apperr.ErrInvalid, "%+v", bad)
	}

	r, err := s.Start(ctx, f, "t")
	require.NoError(t, err)
	assert.Equal(t, 2, r.Matched)
	runner := replay.NewRunner(s, &countingReplayer{calls: map[string]int{}, classes: map[stripebudget.Class]int{}},
		replay.RunnerConfig{Redriver: outbox.NewStore(pool, nil, nil), NotDead: func(err error) bool { return errors.Is(err, apperr.ErrConflict) }})
	worked, err := runner.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, worked)
	got, err := s.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, replay.StatusDone, got.Status)
	assert.Equal(t, 2, got.Applied)
	for i, m := range msgs {
		var dead bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT dead_at IS NOT NULL FROM outbox WHERE id = $1`, ids[i]).Scan(&dead))
		assert.Equal(t, !m.want, dead, "message %d", i)
	}
}
