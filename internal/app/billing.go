package app

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/feedqueue"
	"github.com/stripe-payments/stripe-payments/internal/billing/notify"
	billingstore "github.com/stripe-payments/stripe-payments/internal/billing/store"
	"github.com/stripe-payments/stripe-payments/internal/billing/stripecharge"
	"github.com/stripe-payments/stripe-payments/internal/billing/testclock"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeclient"
)

// newBilling builds the billing core and the worker of its webhook feed.
func (a *App) newBilling() error {
	c := a.Config.Billing
	// The charges draw on the shared budget first (docs/design.md §9); the budget
	// is the only limit, so the charger's own bucket is unlimited.
	charges := stripeclient.New(stripeclient.Options{APIKey: a.Config.StripeAPIKey, BaseURL: a.Config.StripeAPIBase, Log: a.log,
		HTTPClient: a.stripeBudget.Client(nil, stripebudget.Charges)})
	charger := stripecharge.New(charges, stripecharge.Options{Rate: math.Inf(1)})
	locks := lock.New(a.Dynamo, a.Config.LocksTable, lock.Options{Lease: c.LockLease, Heartbeat: c.LockHeartbeat, Log: a.log, Safe: a.safe})
	store := billingstore.New(a.Dynamo, a.Config.BillingTable, a.Config.BillingHistoryTable, c.Shards)
	cfg := billing.DefaultConfig()
	cfg.Shards, cfg.WorkersPerShard, cfg.ReminderDays = c.Shards, c.WorkersPerShard, c.ReminderDays
	cfg.Retry = dates.RetryPolicy{Days: c.RetryDays, StaleDays: c.StaleDays}
	cfg.HardDeclineCodes = c.HardDeclineCodes
	cfg.ReceiptTTL, cfg.LookbackDays, cfg.LockedRetryWait = c.ReceiptTTL, c.LookbackDays, c.LockLease+c.LockHeartbeat
	cfg.PlatformAccount, cfg.Livemode = a.Config.PlatformAccount, a.Config.Livemode()
	cfg.TriggerMinGap = c.TriggerMinGap
	log := a.log.With("component", "billing")
	svc, err := billing.New(cfg, billing.Deps{Store: store, Locks: locks, Charger: charger,
		Notifier: notify.Outbox{Pool: a.Pool, Email: a.Config.SESFromAddress != ""}, Log: log,
		Observer: metrics.NewBilling(a.Metrics.Registry), Safe: a.safe})
	if err != nil {
		return fmt.Errorf("billing: %w", err)
	}
	a.Billing, a.BillingStore = svc, store
	settleWait := c.TestClockSettleWait
	if settleWait == 0 {
		settleWait = -1 // TEST_CLOCK_SETTLE_WAIT=0: do not wait (testclock's zero is its default)
	}
	a.Clocks, err = testclock.New(testclock.Config{MaxClocks: c.TestClocksMax, SettleWait: settleWait}, testclock.Deps{Billing: svc, Store: store,
		Log: log, Safe: a.safe, Runs: a.opsRuns})
	if err != nil {
		return fmt.Errorf("test clocks: %w", err)
	}
	a.billingFeed = &outbox.Worker{Pool: a.Pool, Topic: billing.FeedTopic, Deliver: feedqueue.Deliver(svc, log),
		Log: a.log.With("component", "billing-feed")}
	a.outboxPolicy().Apply(a.billingFeed)
	return nil
}

// startBilling runs the feed worker and, with BILLING_EVERY set, the
// reminder and collection jobs on a ticker, until ctx ends. The returned
// function waits for them to finish their work in flight.
func (a *App) startBilling(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	a.safe.Go(ctx, &wg, "billing_feed", func(ctx context.Context) { _ = a.billingFeed.Run(ctx) })
	if a.Config.Billing.QueueURL != "" {
		a.safe.Go(ctx, &wg, "billing_queue", a.startBillingQueue)
	}
	if every := a.Config.Billing.Every; every > 0 {
		a.safe.Go(ctx, &wg, "billing_ticker", func(ctx context.Context) { a.billingTicker(ctx, every) })
	}
	return wg.Wait
}

func (a *App) billingTicker(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for _, job := range []struct {
			name string
			run  func(context.Context) (*billing.Report, error)
		}{{"remind", a.Billing.RemindNow}, {"collect", a.Billing.CollectNow}} {
			if ctx.Err() != nil {
				return
			}
			started := time.Now()
			rep, err := job.run(ctx)
			if err != nil && ctx.Err() == nil {
				a.log.Error("billing job failed", "error", err)
			}
			if ctx.Err() == nil {
				a.RecordBillingRun(ctx, job.name, a.Billing.NowDate(), started, rep, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RecordBillingRun keeps a job run's report for the operator console; a
// failure to record is logged, never the run's failure.
func (a *App) RecordBillingRun(ctx context.Context, job string, date dates.Date, started time.Time, rep *billing.Report, runErr error) {
	if err := a.opsRuns.Record(ctx, job, date.Time(), started, rep, runErr); err != nil {
		a.log.Warn("could not record billing run", "job", job, "error", err)
	}
}
