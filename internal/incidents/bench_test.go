package incidents_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// BenchmarkList: one read of every incident (the console's list, the
// metrics' scrape at most every 30 s) over 10,000 failed events in 20
// groups, 2,000 billing runs and 500 dead letters.
func BenchmarkList(b *testing.B) {
	pool := testenv.Postgres(b)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at)
		SELECT 'evt_bench' || i, CASE WHEN i % 4 = 0 THEN 'rejected' ELSE 'failed' END, 'invoice.paid',
		       'acct_B' || (i % 5), 'Stripe unreachable: Get "https://api.stripe.com/v1/invoices/in_' || i || '": EOF', $1::timestamptz - i * interval '1 second'
		FROM generate_series(1, 10000) i`, t0)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report, error)
		SELECT CASE WHEN i % 2 = 0 THEN 'collect' ELSE 'remind' END, $1::date, $1::timestamptz - i * interval '1 minute', $1,
		       CASE WHEN i % 3 = 0 THEN '{"unresolved": 1, "unresolved_samples": ["acc/sub"]}' ELSE '{"errors": 1}' END::jsonb, NULL
		FROM generate_series(1, 2000) i`, t0)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `INSERT INTO outbox (id, topic, type, dedupe_key, payload, dead_at, last_error, attempts)
		SELECT gen_random_uuid(), 'action', 'purchase.fulfilled', 'k' || i, '{}', $1::timestamptz - i * interval '1 second', 'receiver answered 500', 8
		FROM generate_series(1, 500) i`, t0)
	require.NoError(b, err)
	s := incidents.New(pool, incidents.Config{PlatformAccount: platform, Now: func() time.Time { return t0 }})
	b.ResetTimer()
	for range b.N {
		list, err := s.List(ctx, "")
		require.NoError(b, err)
		require.NotEmpty(b, list)
	}
}
