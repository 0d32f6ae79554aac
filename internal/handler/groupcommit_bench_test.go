package handler

import (
	"context"
	"testing"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// BenchmarkGroupCommit measures the group commit's own cost (queueing,
// batching, hand-off) with a process that does no I/O, under parallel
// submitters: what robustness changes must not make slower.
func BenchmarkGroupCommit(b *testing.B) {
	g := newBenchGroup()
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := g.submit(ctx, &pending{done: make(chan struct{})}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// newBenchGroup is configured as New configures it by default.
func newBenchGroup() *groupCommit {
	return &groupCommit{maxBatch: 25, maxFlushers: 2, maxQueue: 1000, maxBytes: 64 << 20, batchTimeout: 5 * time.Second,
		process: func(_ context.Context, batch []*pending) {
			for _, p := range batch {
				p.outcome = stripeevent.Applied
				close(p.done)
			}
		}}
}
