package app

import (
	"context"
	"fmt"
	"os"

	"github.com/stripe-payments/stripe-payments/internal/billingqueue"
	"github.com/stripe-payments/stripe-payments/internal/eventbridge"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
)

// newBillingQueue makes the billing core's collection runs enqueue their
// accounts when BILLING_QUEUE_URL is set (docs/billing.md, Billing queue):
// in serve, `billing collect` and a test clock's advance alike. The
// workers that consume the queue run in serve only (startBillingQueue).
func (a *App) newBillingQueue(ctx context.Context) error {
	c := a.Config.Billing
	// The run store is there without the queue too: the API and the
	// console read the runs of an earlier configuration.
	a.billingQueueRuns = opsdata.NewQueueRuns(a.Pool)
	if c.QueueURL == "" {
		return nil
	}
	client, err := eventbridge.NewClient(ctx, a.Config.AWSRegion, a.Config.SQSEndpoint)
	if err != nil {
		return fmt.Errorf("billing queue: %w", err)
	}
	a.billingQueueSQS = client
	enq := billingqueue.NewEnqueuer(billingqueue.EnqueuerConfig{QueueURL: c.QueueURL, Deadline: c.QueueDeadline},
		client, a.billingQueueRuns, a.log)
	a.Billing.UseQueue(enq)
	return nil
}

// startBillingQueue runs this replica's billing queue workers until ctx
// ends; they finish the accounts in hand first.
func (a *App) startBillingQueue(ctx context.Context) {
	c := a.Config.Billing
	host, _ := os.Hostname()
	w := billingqueue.NewWorker(billingqueue.WorkerConfig{
		QueueURL:    c.QueueURL,
		Workers:     c.QueueWorkers,
		MaxReceives: c.QueueMaxReceives,
		// A locked account comes back after a lease: enough to take over a
		// crashed holder's lock.
		LockedDelay: c.LockLease + c.LockHeartbeat,
		Replica:     fmt.Sprintf("%s/%d", host, os.Getpid()),
	}, a.billingQueueSQS, a.Billing, a.billingQueueRuns, metrics.NewBillingQueue(a.Metrics.Registry),
		a.Billing.QueueRunDrained, a.log)
	a.log.Info("billing queue workers running", "queue_url", c.QueueURL, "workers", c.QueueWorkers)
	w.Run(ctx)
}
