package incidents_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

const platform = "acct_platform0001"

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newStore(t *testing.T) (*incidents.Store, *pgxpool.Pool, *clock) {
	pool := testenv.Postgres(t)
	c := &clock{t: t0}
	return incidents.New(pool, incidents.Config{PlatformAccount: platform, Now: c.now}), pool, c
}

func problem(t *testing.T, pool *pgxpool.Pool, id, outcome, typ, account, msg string, at time.Time) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at)
		VALUES ($1, $2, $3, $4, $5, $6)`, id, outcome, typ, account, msg, at)
	require.NoError(t, err)
}

func byKey(list []incidents.Incident) map[string]incidents.Incident {
	m := map[string]incidents.Incident{}
	for _, i := range list {
		m[string(i.Kind)+"|"+i.Cause+"|"+i.EventType+"|"+i.StripeAccount] = i
	}
	return m
}

// Failures are grouped by kind, normalised cause, type and account, from
// every source; what is not (yet) a failure is not an incident.
func TestListGroupsEverySource(t *testing.T) {
	s, pool, _ := newStore(t)
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		problem(t, pool, fmt.Sprintf("evt_unreach%04d", i), "failed", "invoice.paid", "acct_A0000001",
			fmt.Sprintf("Stripe unreachable: Get \"https://api.stripe.com/v1/invoices/in_%08d\": i/o timeout", i), t0.Add(-time.Duration(50-i)*time.Minute))
	}
	// Same cause, other account: another incident.
	problem(t, pool, "evt_unreachB001", "failed", "invoice.paid", "acct_B0000001", "Stripe unreachable: EOF", t0.Add(-time.Hour))
	// Rejected with messages that differ only in ids: one incident.
	problem(t, pool, "evt_rej0000001", "rejected", "charge.succeeded", "acct_A0000001", "unknown purchase pur_AAAAAAAA", t0.Add(-3*time.Minute))
	problem(t, pool, "evt_rej0000002", "rejected", "charge.succeeded", "acct_A0000001", "unknown purchase pur_BBBBBBBB", t0.Add(-2*time.Minute))
	// Thin events: one failing to hydrate, one pending for long, one just received (no incident).
	for _, th := range []struct {
		id, ctx, lastErr string
		received         time.Time
	}{
		{"evt_thinfail001", "acct_A0000001", "stripe: Request rate limit exceeded", t0.Add(-time.Minute)},
		{"evt_thinlong001", "", "", t0.Add(-time.Hour)},
		{"evt_thinnew0001", "", "", t0.Add(-time.Minute)},
	} {
		var lastErr any
		if th.lastErr != "" {
			lastErr = th.lastErr
		}
		_, err := pool.Exec(ctx, `INSERT INTO thin_hydrations (event_id, event_type, context, source, payload, received_at, attempts, last_error)
			VALUES ($1, 'v1.payment_intent.succeeded', $2, 'webhook', '{}', $3, 1, $4)`, th.id, th.ctx, th.received, lastErr)
		require.NoError(t, err)
	}
	// Outbox: a dead letter and a pending message.
	dead := uuid.New()
	_, err := pool.Exec(ctx, `INSERT INTO outbox (id, topic, type, dedupe_key, payload, dead_at, last_error, attempts)
		VALUES ($1, 'email', 'receipt', 'k1', '{}', $2, 'smtp: connection refused', 8), ($3, 'email', 'receipt', 'k2', '{}', NULL, 'x', 1)`,
		dead, t0.Add(-10*time.Minute), uuid.New())
	require.NoError(t, err)
	// Billing runs: collect failed, then succeeded (no incident), remind failed twice since its last success.
	for _, r := range []struct {
		job string
		at  time.Duration
		err any
	}{
		{"collect", -3 * time.Hour, "dynamodb: throttled"},
		{"collect", -2 * time.Hour, nil},
		{"remind", -3 * time.Hour, nil},
		{"remind", -2 * time.Hour, "dynamodb: throttled"},
		{"remind", -1 * time.Hour, "dynamodb: throttled"},
	} {
		_, err := pool.Exec(ctx, `INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report, error) VALUES ($1, $2, $3, $3, '{}', $4)`,
			r.job, t0, t0.Add(r.at), r.err)
		require.NoError(t, err)
	}

	list, err := s.List(ctx, "")
	require.NoError(t, err)
	got := byKey(list)
	require.Len(t, got, 7, "%+v", list)

	unreach := got["event|stripe_unreachable|invoice.paid|acct_A0000001"]
	assert.EqualValues(t, 50, unreach.Count)
	assert.Equal(t, incidents.Open, unreach.State)
	assert.Equal(t, t0.Add(-50*time.Minute), unreach.FirstSeen.UTC())
	assert.Equal(t, t0.Add(-time.Minute), unreach.LastSeen.UTC())
	assert.Equal(t, []string{"evt_unreach0049", "evt_unreach0048", "evt_unreach0047", "evt_unreach0046", "evt_unreach0045"}, unreach.SampleIDs)
	assert.Equal(t, incidents.ID(incidents.KindEvent, "stripe_unreachable", "invoice.paid", "acct_A0000001"), unreach.ID)

	assert.EqualValues(t, 1, got["event|stripe_unreachable|invoice.paid|acct_B0000001"].Count)
	rej := got["event|rejected.other:unknown purchase <id>|charge.succeeded|acct_A0000001"]
	assert.EqualValues(t, 2, rej.Count)
	assert.Equal(t, []string{"evt_rej0000002", "evt_rej0000001"}, rej.SampleIDs)
	assert.EqualValues(t, 1, got["event|hydration.stripe_rate_limited|v1.payment_intent.succeeded|acct_A0000001"].Count)
	pending := got["event|hydration.pending|v1.payment_intent.succeeded|"+platform]
	assert.Equal(t, []string{"evt_thinlong001"}, pending.SampleIDs, "the thin event received a minute ago is not an incident yet")
	dl := got["delivery|network|email/receipt|"]
	assert.Equal(t, []string{dead.String()}, dl.SampleIDs)
	runs := got["billing|dynamodb_unavailable|remind|"]
	assert.EqualValues(t, 2, runs.Count, "only the runs since the job's last success")
	_, collect := got["billing|dynamodb_unavailable|collect|"]
	assert.False(t, collect, "a job that succeeded since is not an incident")

	// Newest occurrence first.
	for i := 1; i < len(list); i++ {
		assert.False(t, list[i].LastSeen.After(list[i-1].LastSeen))
	}
}

func TestStateTransitionsAuditAndReopen(t *testing.T) {
	s, pool, c := newStore(t)
	ctx := context.Background()
	problem(t, pool, "evt_a000000001", "failed", "invoice.paid", "acct_A0000001", "context deadline exceeded", t0.Add(-time.Hour))
	id := incidents.ID(incidents.KindEvent, "timeout", "invoice.paid", "acct_A0000001")

	// Refusals change nothing.
	_, err := s.SetState(ctx, id, incidents.Open, "api")
	assert.ErrorIs(t, err, apperr.ErrInvalid)
	_, err = s.SetState(ctx, id, "bogus", "api")
	assert.ErrorIs(t, err, apperr.ErrInvalid)
	_, err = s.SetState(ctx, "inc_00000000000000000000", incidents.Resolved, "api")
	assert.ErrorIs(t, err, apperr.ErrNotFound)
	audit, err := s.Audit(ctx, id)
	require.NoError(t, err)
	assert.Empty(t, audit)

	c.t = t0.Add(time.Minute)
	inc, err := s.SetState(ctx, id, incidents.Acknowledged, "console")
	require.NoError(t, err)
	assert.Equal(t, incidents.Acknowledged, inc.State)
	// Same state again: no change, no audit row.
	_, err = s.SetState(ctx, id, incidents.Acknowledged, "api")
	require.NoError(t, err)
	list, err := s.List(ctx, incidents.Acknowledged)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "console", list[0].StateBy)
	open, err := s.List(ctx, incidents.Open)
	require.NoError(t, err)
	assert.Empty(t, open)

	c.t = t0.Add(2 * time.Minute)
	_, err = s.SetState(ctx, id, incidents.Resolved, "api")
	require.NoError(t, err)
	_, err = s.SetState(ctx, id, incidents.Acknowledged, "api")
	assert.ErrorIs(t, err, apperr.ErrConflict)

	// Still resolved while nothing new fails (the old occurrence remains).
	c.t = t0.Add(time.Hour)
	inc, err = s.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, incidents.Resolved, inc.State)

	// The cause comes back: open again, audited as the system.
	problem(t, pool, "evt_a000000002", "failed", "invoice.paid", "acct_A0000001", "context deadline exceeded", t0.Add(30*time.Minute))
	inc, err = s.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, incidents.Open, inc.State)
	assert.EqualValues(t, 2, inc.Count)
	// A second reader does not reopen it twice.
	_, err = s.List(ctx, "")
	require.NoError(t, err)

	audit, err = s.Audit(ctx, id)
	require.NoError(t, err)
	want := []incidents.AuditEntry{
		{From: incidents.Open, To: incidents.Acknowledged, Actor: "console", At: t0.Add(time.Minute)},
		{From: incidents.Acknowledged, To: incidents.Resolved, Actor: "api", At: t0.Add(2 * time.Minute)},
		{From: incidents.Resolved, To: incidents.Open, Actor: incidents.SystemActor, At: t0.Add(time.Hour)},
	}
	require.Len(t, audit, len(want))
	for i := range want {
		audit[i].At = audit[i].At.UTC()
		assert.Equal(t, want[i], audit[i])
	}
}

// A resolved incident whose occurrences are all gone (replayed) is still
// listed with its state and a count of 0.
func TestResolvedIncidentWithoutOccurrencesKeepsItsState(t *testing.T) {
	s, pool, c := newStore(t)
	ctx := context.Background()
	problem(t, pool, "evt_gone000001", "failed", "invoice.paid", "acct_A0000001", "context deadline exceeded", t0.Add(-time.Hour))
	id := incidents.ID(incidents.KindEvent, "timeout", "invoice.paid", "acct_A0000001")
	_, err := s.SetState(ctx, id, incidents.Resolved, "api")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM ops_event_problems`)
	require.NoError(t, err)
	list, err := s.List(ctx, incidents.Resolved)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.EqualValues(t, 0, list[0].Count)
	assert.Empty(t, list[0].SampleIDs)
	c.t = t0.Add(31 * 24 * time.Hour)
	list, err = s.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, list, "past Keep a state without occurrences is no longer listed")
}
