package jobs

import (
	"context"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// The sweep: a period due while the jobs did not run is still charged or
// marked, never forgotten (docs/design.md §8 "Failures"), without a table scan.
//
// The collection job reads the payments index partitions of its date and
// of the days before it. Every item stays in the partition of the date it
// is due on until a job acts on it, so what an outage left behind is in
// the partitions of the days the job missed. One item (PK=SWEEP, SK=<job>)
// keeps a watermark: the last date through which a run left nothing behind
// (no locked account, no error, no unknown outcome). A run reads from the
// earlier of (watermark + 1) and (date − BILLING_LOOKBACK_DAYS) to its
// date, and moves the watermark to two days before its date (an entry of
// the last day may not be due yet in its own time zone) only when it was
// clean. So a daily run reads lookback+1 partitions per shard, as
// before; after an outage of N days the first run reads N of them once
// (periods past BILLING_STALE_DAYS are marked STALE, the others charged,
// the catch-up loop charges what followed); and a run that leaves an
// unknown outcome keeps the watermark where it was, so that period is read
// again on every run until it is resolved, whatever the lookback.
// Without a watermark (the first run), a run reads back
// max(lookback, BILLING_STALE_DAYS) days. The watermark is kept by the
// store (Store.SweepWatermark, AdvanceSweep).

// The sweep: a period due while the jobs did not run is still charged or
// marked, never forgotten (docs/design.md §8 "Failures"), without a table scan.
//
// The collection job reads the payments index partitions of its date and
// of the days before it. Every item stays in the partition of the date it
// is due on until a job acts on it, so what an outage left behind is in
// the partitions of the days the job missed. One item (PK=SWEEP, SK=<job>)
// keeps a watermark: the last date through which a run left nothing behind
// (no locked account, no error, no unknown outcome). A run reads from the
// earlier of (watermark + 1) and (date − BILLING_LOOKBACK_DAYS) to its
// date, and moves the watermark to two days before its date (an entry of
// the last day may not be due yet in its own time zone) only when it was
// clean. So a daily run reads lookback+1 partitions per shard, as
// before; after an outage of N days the first run reads N of them once
// (periods past BILLING_STALE_DAYS are marked STALE, the others charged,
// the catch-up loop charges what followed); and a run that leaves an
// unknown outcome keeps the watermark where it was, so that period is read
// again on every run until it is resolved, whatever the lookback.
// Without a watermark (the first run), a run reads back
// max(lookback, BILLING_STALE_DAYS) days. The watermark is kept by the
// store (Store.SweepWatermark, AdvanceSweep).

// sweepFrom is the oldest partition date a run of job for date reads.
func (r *Runner) sweepFrom(ctx context.Context, job string, date dates.Date) (dates.Date, error) {
	from := date.AddDays(-r.Cfg.LookbackDays)
	wm, err := r.Store.SweepWatermark(ctx, job)
	if err != nil {
		return from, fmt.Errorf("%s: %w", job, err)
	}
	if wm.IsZero() {
		return date.AddDays(-max(r.Cfg.LookbackDays, r.Cfg.Retry.StaleDays)), nil
	}
	if next := wm.AddDays(1); next.Before(from) {
		return next, nil
	}
	return from, nil
}
