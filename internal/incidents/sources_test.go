package incidents_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/incidents"
)

// run records a billing job run: its report JSON and error ("" none).
func run(t *testing.T, pool *pgxpool.Pool, job string, at time.Time, report, runErr string) string {
	t.Helper()
	var e any
	if runErr != "" {
		e = runErr
	}
	var id string
	require.NoError(t, pool.QueryRow(context.Background(), `INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report, error)
		VALUES ($1, $2, $3, $3, $4, $5) RETURNING id::text`, job, at, at, report, e).Scan(&id))
	return id
}

// Charges whose outcome is unknown are a billing incident of the job whose
// runs left them: from the first run that left one since the last run that
// left none, counting what the newest run left; a run that settles them all
// ends it.
func TestUnresolvedChargesAreABillingIncident(t *testing.T) {
	s, pool, _ := newStore(t)
	ctx := context.Background()
	id := incidents.ID(incidents.KindBilling, incidents.CauseChargeOutcomeUnknown, "collect", "")
	key := "billing|" + incidents.CauseChargeOutcomeUnknown + "|collect|"

	run(t, pool, "collect", t0.Add(-6*time.Hour), `{"unknown": 1, "unresolved": 1}`, "") // settled by the next clean run
	run(t, pool, "collect", t0.Add(-5*time.Hour), `{"succeeded": 3}`, "")
	first := run(t, pool, "collect", t0.Add(-3*time.Hour), `{"unknown": 2, "unresolved": 2}`, "")
	second := run(t, pool, "collect", t0.Add(-2*time.Hour), `{"resolved": 1, "unresolved": 1}`, "")
	run(t, pool, "remind", t0.Add(-time.Hour), `{"reminded": 4}`, "") // another job's clean run changes nothing

	list, err := s.List(ctx, "")
	require.NoError(t, err)
	got := byKey(list)
	require.Len(t, got, 1, "%+v", list)
	inc := got[key]
	assert.Equal(t, id, inc.ID)
	assert.EqualValues(t, 1, inc.Count, "what the newest run left unresolved")
	assert.Equal(t, t0.Add(-3*time.Hour), inc.FirstSeen.UTC())
	assert.Equal(t, t0.Add(-2*time.Hour), inc.LastSeen.UTC())
	assert.Equal(t, []string{second, first}, inc.SampleIDs)
	assert.Equal(t, "", inc.StripeAccount)

	// A run whose report names the subscriptions: they are the samples.
	run(t, pool, "collect", t0.Add(-100*time.Minute), `{"unresolved": 2, "unresolved_samples": ["acc-1/sub_A", "acc-2/sub_B"]}`, "")
	list, err = s.List(ctx, "")
	require.NoError(t, err)
	inc = byKey(list)[key]
	assert.EqualValues(t, 2, inc.Count)
	assert.Equal(t, []string{"acc-1/sub_A", "acc-2/sub_B"}, inc.SampleIDs)

	// A failed run settles nothing: still open, and a failed-run incident beside it.
	run(t, pool, "collect", t0.Add(-90*time.Minute), `{}`, "dynamodb: throttled")
	list, err = s.List(ctx, incidents.Open)
	require.NoError(t, err)
	got = byKey(list)
	assert.Contains(t, got, key)
	assert.Contains(t, got, "billing|dynamodb_unavailable|collect|")

	// A run that leaves none ends it.
	run(t, pool, "collect", t0.Add(-time.Hour), `{"resolved": 1, "succeeded": 2}`, "")
	list, err = s.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, list)
}

// A run that ended without an error yet left entries failed, or accounts
// untouched under another holder's lock, is a billing incident of its job
// until a run leaves none; each counter is its own cause.
func TestIncompleteRunsAreBillingIncidents(t *testing.T) {
	s, pool, _ := newStore(t)
	ctx := context.Background()
	run(t, pool, "collect", t0.Add(-4*time.Hour), `{"errors": 3, "locked": 1}`, "")
	second := run(t, pool, "collect", t0.Add(-3*time.Hour), `{"errors": 2}`, "")
	run(t, pool, "remind", t0.Add(-2*time.Hour), `{"locked": 2}`, "")
	run(t, pool, "remind", t0.Add(-time.Hour), `{"reminded": 5}`, "") // settles remind's
	run(t, pool, "collect", t0.Add(-30*time.Minute), `{}`, "dynamodb: throttled")

	list, err := s.List(ctx, "")
	require.NoError(t, err)
	got := byKey(list)
	errs := got["billing|"+incidents.CauseRunEntriesFailed+"|collect|"]
	assert.EqualValues(t, 2, errs.Count, "what the newest such run left")
	assert.Equal(t, second, errs.SampleIDs[0])
	assert.Equal(t, t0.Add(-4*time.Hour), errs.FirstSeen.UTC())
	assert.NotContains(t, got, "billing|"+incidents.CauseRunAccountsLocked+"|collect|",
		"collect's second run got every lock: each counter has its own streak")
	assert.NotContains(t, got, "billing|"+incidents.CauseRunAccountsLocked+"|remind|", "settled by a later clean run")
	assert.Contains(t, got, "billing|dynamodb_unavailable|collect|", "a failed run settles nothing and is its own incident")
	require.Len(t, got, 2, "%+v", list)

	// A lock held again later: a new incident of locked accounts.
	run(t, pool, "remind", t0.Add(-10*time.Minute), `{"locked": 1}`, "")
	list, err = s.List(ctx, "")
	require.NoError(t, err)
	assert.EqualValues(t, 1, byKey(list)["billing|"+incidents.CauseRunAccountsLocked+"|remind|"].Count)
}

// Every source: a resolved incident reopens (audited as the system) when
// its cause comes back after the resolution, and only then.
func TestResolvedIncidentReopensWhenItsCauseComesBack(t *testing.T) {
	thin := func(id, lastErr string, received time.Time) func(*testing.T, *pgxpool.Pool) {
		return func(t *testing.T, pool *pgxpool.Pool) {
			var e any
			if lastErr != "" {
				e = lastErr
			}
			_, err := pool.Exec(context.Background(), `INSERT INTO thin_hydrations (event_id, event_type, context, source, payload, received_at, attempts, last_error)
				VALUES ($1, 'v1.invoice.paid', 'acct_A0000001', 'webhook', '{}', $2, 1, $3)`, id, received, e)
			require.NoError(t, err)
		}
	}
	dead := func(key string, at time.Time) func(*testing.T, *pgxpool.Pool) {
		return func(t *testing.T, pool *pgxpool.Pool) {
			_, err := pool.Exec(context.Background(), `INSERT INTO outbox (id, topic, type, dedupe_key, payload, dead_at, last_error, attempts)
				VALUES ($1, 'email', 'receipt', $2, '{}', $3, 'smtp: connection refused', 8)`, uuid.New(), key, at)
			require.NoError(t, err)
		}
	}
	billing := func(report, runErr string, at time.Time) func(*testing.T, *pgxpool.Pool) {
		return func(t *testing.T, pool *pgxpool.Pool) { run(t, pool, "collect", at, report, runErr) }
	}
	failed := func(id, outcome string, at time.Time) func(*testing.T, *pgxpool.Pool) {
		return func(t *testing.T, pool *pgxpool.Pool) {
			problem(t, pool, id, outcome, "invoice.paid", "acct_A0000001", "unknown purchase pur_ABCDEFGH", at)
		}
	}
	before, after := t0.Add(-time.Hour), t0.Add(30*time.Minute)
	cases := []struct {
		name          string
		id            string
		first, second func(*testing.T, *pgxpool.Pool)
	}{
		{"failed event", incidents.ID(incidents.KindEvent, "other:unknown purchase <id>", "invoice.paid", "acct_A0000001"),
			failed("evt_reopen0001", "failed", before), failed("evt_reopen0002", "failed", after)},
		{"rejected event", incidents.ID(incidents.KindEvent, "rejected.other:unknown purchase <id>", "invoice.paid", "acct_A0000001"),
			failed("evt_reopen0001", "rejected", before), failed("evt_reopen0002", "rejected", after)},
		{"thin event not hydrated", incidents.ID(incidents.KindEvent, "hydration.pending", "v1.invoice.paid", "acct_A0000001"),
			thin("evt_thinreop001", "", before), thin("evt_thinreop002", "", after)},
		{"thin event failing to hydrate", incidents.ID(incidents.KindEvent, "hydration.stripe_rate_limited", "v1.invoice.paid", "acct_A0000001"),
			thin("evt_thinreop001", "rate limit", before), thin("evt_thinreop002", "rate limit", after)},
		{"outbox dead letter", incidents.ID(incidents.KindDelivery, "network", "email/receipt", ""),
			dead("k1", before), dead("k2", after)},
		{"failed billing run", incidents.ID(incidents.KindBilling, "dynamodb_unavailable", "collect", ""),
			billing(`{}`, "dynamodb: throttled", before), billing(`{}`, "dynamodb: throttled", after)},
		{"unresolved charges", incidents.ID(incidents.KindBilling, incidents.CauseChargeOutcomeUnknown, "collect", ""),
			billing(`{"unknown": 1, "unresolved": 1}`, "", before), billing(`{"unresolved": 1}`, "", after)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, pool, c := newStore(t)
			ctx := context.Background()
			tc.first(t, pool)
			inc, err := s.SetState(ctx, tc.id, incidents.Resolved, "api")
			require.NoError(t, err, "the incident exists")
			assert.Equal(t, incidents.Resolved, inc.State)

			c.t = t0.Add(10 * time.Minute)
			inc, err = s.Get(ctx, tc.id)
			require.NoError(t, err)
			assert.Equal(t, incidents.Resolved, inc.State, "nothing new: stays resolved")

			tc.second(t, pool)
			c.t = t0.Add(time.Hour)
			inc, err = s.Get(ctx, tc.id)
			require.NoError(t, err)
			assert.Equal(t, incidents.Open, inc.State, "the cause came back")
			assert.Equal(t, incidents.SystemActor, inc.StateBy)
			audit, err := s.Audit(ctx, tc.id)
			require.NoError(t, err)
			require.Len(t, audit, 2)
			assert.Equal(t, incidents.AuditEntry{From: incidents.Resolved, To: incidents.Open, Actor: incidents.SystemActor, At: audit[1].At}, audit[1])
		})
	}
}

// Counts groups the incidents by kind and state with their occurrences.
func TestCounts(t *testing.T) {
	s, pool, _ := newStore(t)
	ctx := context.Background()
	problem(t, pool, "evt_count00001", "failed", "invoice.paid", "acct_A0000001", "context deadline exceeded", t0.Add(-time.Hour))
	problem(t, pool, "evt_count00002", "failed", "invoice.paid", "acct_A0000001", "context deadline exceeded", t0.Add(-time.Minute))
	problem(t, pool, "evt_count00003", "failed", "invoice.paid", "acct_B0000001", "context deadline exceeded", t0.Add(-time.Minute))
	run(t, pool, "collect", t0.Add(-time.Hour), `{"unresolved": 3}`, "")
	_, err := s.SetState(ctx, incidents.ID(incidents.KindEvent, "timeout", "invoice.paid", "acct_B0000001"), incidents.Acknowledged, "api")
	require.NoError(t, err)
	counts, err := s.Counts(ctx)
	require.NoError(t, err)
	got := map[string][2]int64{}
	for _, c := range counts {
		got[c.Kind+"|"+c.State] = [2]int64{int64(c.Incidents), c.Occurrences}
	}
	assert.Equal(t, map[string][2]int64{"event|open": {1, 2}, "event|acknowledged": {1, 1}, "billing|open": {1, 3}}, got)
}

// runOn records a run of job for date started at at.
func runOn(t *testing.T, pool *pgxpool.Pool, job, date string, at time.Time, report string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report)
		VALUES ($1, $2::date, $3, $3, $4)`, job, date, at, report)
	require.NoError(t, err)
}

// A clean run settles what a run left only if it covered that run's date:
// `collect --date D` never reads the charges in flight of a later date, so
// an older-date rerun that leaves nothing does not end the incident.
func TestOlderDateCleanRunKeepsTheIncidentOpen(t *testing.T) {
	tests := []struct {
		name      string
		cleanDate string
		open      bool
	}{
		{"clean run for an earlier date", "2026-11-24", true},
		{"clean run for the same date", "2026-11-25", false},
		{"clean run for a later date", "2026-11-26", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, pool, _ := newStore(t)
			key := "billing|" + incidents.CauseChargeOutcomeUnknown + "|collect|"
			runOn(t, pool, "collect", "2026-11-25", t0.Add(-2*time.Hour), `{"unknown": 1, "unresolved": 1}`)
			runOn(t, pool, "collect", tt.cleanDate, t0.Add(-time.Hour), `{"succeeded": 2}`)
			list, err := s.List(context.Background(), "")
			require.NoError(t, err)
			if tt.open {
				require.Contains(t, byKey(list), key)
				assert.EqualValues(t, 1, byKey(list)[key].Count)
			} else {
				assert.NotContains(t, byKey(list), key)
			}
		})
	}
}

// The same for a failed run: a later run for an earlier date that ends
// without an error never read the failed run's date, so it settles nothing.
func TestOlderDateSuccessfulRunKeepsTheFailedRunIncident(t *testing.T) {
	s, pool, _ := newStore(t)
	ctx := context.Background()
	key := "billing|dynamodb_unavailable|collect|"
	_, err := pool.Exec(ctx, `INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report, error)
		VALUES ('collect', '2026-11-25', $1, $1, '{}', 'dynamodb: throttled')`, t0.Add(-2*time.Hour))
	require.NoError(t, err)
	runOn(t, pool, "collect", "2026-11-24", t0.Add(-time.Hour), `{"succeeded": 1}`)
	list, err := s.List(ctx, "")
	require.NoError(t, err)
	assert.Contains(t, byKey(list), key, "an older date's run settles nothing")

	runOn(t, pool, "collect", "2026-11-25", t0.Add(-30*time.Minute), `{"succeeded": 1}`)
	list, err = s.List(ctx, "")
	require.NoError(t, err)
	assert.NotContains(t, byKey(list), key, "a run for the same date settles it")
}
