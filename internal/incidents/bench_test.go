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

// BenchmarkList100kProblems: one read of every incident over 100,000
// failed and rejected events with distinct messages (each names its own
// event and objects, as real ones do) in 60 groups (3 causes, 4 types,
// 10 accounts: i mod 60). The rows are written as a writer without the classifier would
// (no cause); the first read, before the timer, classifies them.
// Reproduce the numbers in BENCHMARKS.md with its command.
func BenchmarkList100kProblems(b *testing.B) {
	pool := testenv.Postgres(b)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at)
		SELECT 'evt_bench' || i, CASE WHEN i % 3 = 0 THEN 'rejected' ELSE 'failed' END,
		       (ARRAY['invoice.paid', 'payment_intent.succeeded', 'charge.refunded', 'customer.subscription.updated'])[1 + i % 4],
		       'acct_B' || (i % 10),
		       CASE i % 3
		         WHEN 0 THEN 'apply event evt_bench' || i || ': event object cannot be processed: payment intent id "pi_' || i || '" is not a PaymentIntent id'
		         WHEN 1 THEN 'Stripe unreachable: Get "https://api.stripe.com/v1/invoices/in_' || i || '": EOF'
		         ELSE 'subscription sub_Bench' || i || ' has ' || (i % 7) || ' periods, want 1'
		       END,
		       $1::timestamptz - i * interval '1 second'
		FROM generate_series(1, 100000) i`, t0)
	require.NoError(b, err)
	s := incidents.New(pool, incidents.Config{PlatformAccount: platform, Now: func() time.Time { return t0 }})
	list, err := s.List(ctx, "")
	require.NoError(b, err)
	require.Equal(b, 60, len(list))
	// As autovacuum leaves a table that grew to this size.
	_, err = pool.Exec(ctx, `VACUUM ANALYZE`)
	require.NoError(b, err)
	b.ResetTimer()
	for range b.N {
		list, err := s.List(ctx, "")
		require.NoError(b, err)
		require.Equal(b, 60, len(list))
	}
}
