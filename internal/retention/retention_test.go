package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/retention"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// TestPruneDeletesOnlyRowsPastTheirRetention: on a real Postgres, each
// kind of operator row older than its retention is deleted (in batches
// smaller than the backlog) and counted; younger rows, pending and
// delivered outbox messages are kept.
func TestPruneDeletesOnlyRowsPastTheirRetention(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	old, young := now.Add(-100*24*time.Hour), now.Add(-10*24*time.Hour)
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, q, args...)
		require.NoError(t, err)
	}
	for i, at := range []time.Time{old, old, old, young} {
		exec(`INSERT INTO outbox (id, topic, type, dedupe_key, payload, created_at, dead_at, last_error)
			VALUES ($1, 'email', 'billing.reminder_due', $2, '{"to":"x@example.com"}', $3, $3, 'gave up')`,
			uuid.New(), "dead-"+string(rune('a'+i)), at)
	}
	exec(`INSERT INTO outbox (id, topic, type, dedupe_key, payload, created_at) VALUES ($1, 'action', 't', 'pending', '{}', $2)`, uuid.New(), old)
	exec(`INSERT INTO outbox (id, topic, type, dedupe_key, payload, created_at, delivered_at) VALUES ($1, 'action', 't', 'delivered', '{}', $2, $2)`, uuid.New(), old)
	for i, at := range []time.Time{old, young} {
		id := []string{"evt_old", "evt_young"}[i]
		exec(`INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at) VALUES ($1, 'failed', 't', 'acct', 'e', $2)`, id, at)
		exec(`INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report) VALUES ('collect', $1::date, $1, $1, '{}')`, at)
		exec(`INSERT INTO ops_event_hours (hour, outcome, n) VALUES (date_trunc('hour', $1::timestamptz), 'applied', 1)`, at)
		exec(`INSERT INTO event_records_quarantined (event_id, record, payload, enqueued_at, quarantined_at, tries, error)
			VALUES ($1, '{}', '{}', $2, $2, 5, 'ValidationException')`, id, at)
		exec(`INSERT INTO event_records_prior (event_id, at) VALUES ($1, $2)`, id, at)
		run := uuid.New()
		exec(`INSERT INTO ops_billing_queue_runs (id, job, date, started_at, heartbeat_at, deadline, drained_at)
			VALUES ($1, 'collect', $2::date, $2, $2, $2, $2)`, run, at)
		exec(`INSERT INTO ops_billing_queue_messages (run_id, account, part, outcome, receives, at) VALUES ($1, $2, 0, 'collected', 1, $3)`, run, id, at)
	}
	// A mark 30 days old, under twice the 20-day EVENT_TTL: its record may
	// still be in the table, so it stays.
	exec(`INSERT INTO event_records_prior (event_id, at) VALUES ('evt_within_ttl', $1)`, now.Add(-30*24*time.Hour))

	// Replays: finished long ago (done, cancelled) go with their items; a
	// young one and a running one (however old) stay.
	for _, r := range []struct {
		id, status string
		created    time.Time
		finished   any
	}{
		{"rpl_old_done", "done", old, old},
		{"rpl_old_cancelled", "cancelled", old, old},
		{"rpl_young_done", "done", old, young},
		{"rpl_old_running", "running", old, nil},
	} {
		var by any
		if r.status == "cancelled" {
			by = "console"
		}
		exec(`INSERT INTO replays (id, filter, status, matched, created_by, created_at, finished_at, cancelled_by)
			VALUES ($1, '{"type":"invoice.paid"}', $2, 2, 'api', $3, $4, $5)`, r.id, r.status, r.created, r.finished, by)
		exec(`INSERT INTO replay_items (replay_id, seq, event_id, stripe_account) VALUES ($1, 0, 'evt_1', 'acct'), ($1, 1, 'evt_2', 'acct')`, r.id)
	}
	for _, at := range []time.Time{old, young} {
		exec(`INSERT INTO incident_audit (incident_id, from_state, to_state, actor, at) VALUES ('inc_00000000000000000001', 'open', 'resolved', 'api', $1)`, at)
	}
	exec(`INSERT INTO incidents (id, kind, cause, event_type, stripe_account, state, state_at, state_by)
		VALUES ('inc_00000000000000000001', 'event', 'timeout', 'invoice.paid', 'acct', 'resolved', $1, 'api')`, old)

	got := map[string]int64{}
	rules := retention.Rules(30*24*time.Hour, 60*24*time.Hour, 20*24*time.Hour)
	require.NoError(t, retention.Prune(ctx, pool, now, rules, 2, func(name string, n int64) { got[name] += n }))
	assert.Equal(t, map[string]int64{"outbox_dead": 3, "event_records_quarantined": 1, "ops_event_problems": 1,
		"ops_billing_runs": 1, "ops_event_hours": 1, "replays": 2, "incident_audit": 1, "event_records_prior": 1,
		"ops_billing_queue_runs": 1}, got)
	count := func(q string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, q).Scan(&n))
		return n
	}
	assert.Equal(t, 1, count(`SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL`), "the young dead letter stays")
	assert.Equal(t, 1, count(`SELECT count(*) FROM outbox WHERE dedupe_key = 'pending'`), "a pending message is never pruned here")
	assert.Equal(t, 1, count(`SELECT count(*) FROM outbox WHERE dedupe_key = 'delivered'`), "delivered rows have their own retention")
	for _, table := range []string{"ops_event_problems", "ops_billing_runs", "ops_event_hours", "event_records_quarantined",
		"ops_billing_queue_runs", "ops_billing_queue_messages"} {
		assert.Equal(t, 1, count(`SELECT count(*) FROM `+table), table)
	}

	assert.Equal(t, 2, count(`SELECT count(*) FROM replays WHERE id IN ('rpl_young_done', 'rpl_old_running')`), "young and running replays stay")
	assert.Equal(t, 2, count(`SELECT count(*) FROM replays`))
	assert.Equal(t, 4, count(`SELECT count(*) FROM replay_items`), "the pruned replays' items went with them")
	assert.Equal(t, 1, count(`SELECT count(*) FROM incident_audit`), "the young audit row stays")
	assert.Equal(t, 1, count(`SELECT count(*) FROM incidents`), "incident states are not pruned")
	assert.Equal(t, 2, count(`SELECT count(*) FROM event_records_prior WHERE event_id IN ('evt_young', 'evt_within_ttl')`), "marks under twice EVENT_TTL stay")
	assert.Equal(t, 2, count(`SELECT count(*) FROM event_records_prior`))

	// Nothing left to prune: a second pass deletes nothing.
	got = map[string]int64{}
	require.NoError(t, retention.Prune(ctx, pool, now, rules, 2, func(name string, n int64) { got[name] += n }))
	for name, n := range got {
		assert.Zero(t, n, name)
	}
	assert.Error(t, retention.Prune(ctx, pool, now, []retention.Rule{{Name: "x", Table: "outbox", Delete: outbox.DeleteDeadBefore}}, 2, nil))
	assert.Error(t, retention.Prune(ctx, pool, now, []retention.Rule{{Name: "x", Table: "outbox", Keep: time.Hour}}, 2, nil), "a rule no owner deletes")
}

// An incident not resolved keeps its whole audit trail, however old: who
// acknowledged it and when is what the operator on call reads.
func TestPruneKeepsTheAuditOfIncidentsNotResolved(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	old := now.Add(-100 * 24 * time.Hour)
	tests := []struct {
		id, state string
		kept      bool
	}{
		{"inc_00000000000000000001", "open", true},
		{"inc_00000000000000000002", "acknowledged", true},
		{"inc_00000000000000000003", "resolved", false},
	}
	for _, tt := range tests {
		_, err := pool.Exec(ctx, `INSERT INTO incidents (id, kind, cause, event_type, stripe_account, state, state_at, state_by)
			VALUES ($1, 'event', 'timeout', 'invoice.paid', 'acct', $2, $3, 'api')`, tt.id, tt.state, old)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO incident_audit (incident_id, from_state, to_state, actor, at) VALUES ($1, 'open', $2, 'api', $3)`, tt.id, tt.state, old)
		require.NoError(t, err)
	}
	require.NoError(t, retention.Prune(ctx, pool, now, retention.Rules(30*24*time.Hour, 60*24*time.Hour, 20*24*time.Hour), 10, nil))
	for _, tt := range tests {
		t.Run(tt.state, func(t *testing.T) {
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM incident_audit WHERE incident_id = $1`, tt.id).Scan(&n))
			if tt.kept {
				assert.Equal(t, 1, n, "the audit of an incident not resolved stays")
			} else {
				assert.Zero(t, n, "a resolved incident's old audit goes")
			}
		})
	}
}
