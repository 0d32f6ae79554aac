package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkCollectionsAtScale runs the collection runs of BENCHMARKS.md
// "Collections at scale" side by side, each on a fresh stack (its own
// database, tables and queue), with the fake Stripe unthrottled and
// STRIPE_RATE_LIMIT far above what the machine reaches:
//
//	inprocess   one replica, no queue: the baseline
//	queue1      one replica through the billing queue
//	queue3      three replicas through the billing queue
//	queue3kill  three replicas, replica 2 kill -9ed at a quarter and restarted
//
// Each checks exactly-once at the fake Stripe as the test does.
// COLLECTIONS_BENCH_SUBS (default 2000) sets N, COLLECTIONS_BENCH_VARIANTS
// (comma-separated) which variants run, in that order. bench/collections.sh
// runs it against a durable Postgres.
func BenchmarkCollectionsAtScale(b *testing.B) {
	n := 2000
	if v := os.Getenv("COLLECTIONS_BENCH_SUBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("COLLECTIONS_BENCH_SUBS=%q: a positive number of subscriptions", v)
		}
	}
	variants := map[string]collectionsConfig{
		"inprocess":  {Replicas: 1},
		"queue1":     {Replicas: 1, Queue: true},
		"queue3":     {Replicas: 3, Queue: true},
		"queue3kill": {Replicas: 3, Queue: true, Kill: true, KillAfter: 0.25},
	}
	order := []string{"inprocess", "queue1", "queue3", "queue3kill"}
	if v := os.Getenv("COLLECTIONS_BENCH_VARIANTS"); v != "" {
		order = strings.Split(v, ",")
	}
	for _, name := range order {
		cfg, ok := variants[name]
		if !ok {
			b.Fatalf("COLLECTIONS_BENCH_VARIANTS: no variant %q (inprocess, queue1, queue3, queue3kill)", name)
		}
		cfg.Subs, cfg.RateLimit = n, 10000 // STRIPE_RATE_LIMIT's maximum
		b.Run(name, func(b *testing.B) {
			for range b.N {
				res := runCollections(b, cfg)
				b.ReportMetric(res.perSecond(n), "accounts/s")
				b.ReportMetric(float64(res.DynamoRequests)/float64(n), "ddb-req/collection")
				b.ReportMetric(res.Elapsed.Seconds(), "s/run")
				b.Logf("%s: %d subscriptions due (seeded in %s); run %s = %.1f accounts/s (workers' span %s); DynamoDB %d requests = %.2f per collection %v; %d PaymentIntents, %d Stripe requests; queue: %d collected, %d found done, %d replicas; kill at %s (%d collected), %d received again; load %s → %s",
					name, n, res.SeedTime.Round(time.Millisecond), res.Elapsed.Round(time.Millisecond), res.perSecond(n), res.CollectSpan.Round(time.Millisecond),
					res.DynamoRequests, float64(res.DynamoRequests)/float64(n), res.DynamoOps, res.PICreations, res.StripeRequests,
					res.Collected, res.NothingDue, res.Replicas, res.KilledAt.Round(time.Millisecond), res.CollectedAtKill, res.ReceivedAgain,
					res.LoadBefore, res.LoadAfter)
			}
		})
	}
}
