package app

import (
	"context"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/eventbridge"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
)

// EventBridgeIngester is what the EventBridge intake hands each event to:
// the webhook's path after its signature check, the one ingest entry point
// (a.Ingest: a snapshot detail is recorded and processed, a thin one
// recorded and queued for hydration).
func (a *App) EventBridgeIngester() eventbridge.Ingester {
	return ingestOutcome{a.Ingest}
}

// startEventBridge long-polls EVENTBRIDGE_QUEUE_URL inside serve (docs/design.md
// §4); off when it is empty. stop ends the receives, lets the messages in
// hand finish and waits for them.
func (a *App) startEventBridge(ctx context.Context) (stop func(), err error) {
	if a.Config.EventBridgeQueueURL == "" {
		return func() {}, nil
	}
	client, err := eventbridge.NewClient(ctx, a.Config.AWSRegion, a.Config.SQSEndpoint)
	if err != nil {
		return nil, fmt.Errorf("eventbridge intake: %w", err)
	}
	c := eventbridge.New(eventbridge.Config{
		QueueURL:       a.Config.EventBridgeQueueURL,
		IngestTimeout:  a.Config.Limits.IngestTimeout + a.Config.Limits.IngestBatchTimeout,
		FailureBackoff: eventbridge.DefaultFailureBackoff,
	}, client, a.EventBridgeIngester(), metrics.NewEventBridge(a.Metrics.Registry), a.log.With("component", "eventbridge"))
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	a.log.Info("eventbridge intake running", "queue_url", a.Config.EventBridgeQueueURL)
	go func() {
		defer close(done)
		a.safe.Loop(ctx, "eventbridge", c.Run)
	}()
	return func() { cancel(); <-done }, nil
}
