package app

import (
	"context"
	"fmt"
	"sync"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/trigger"
	"github.com/stripe-payments/stripe-payments/internal/eventbridge"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
)

// Triggers are the collections the platform triggers (docs/design.md §8):
// the intake the API and the queue record through, and the processor
// serve collects recorded triggers with, through the billing core's
// CollectTriggered at the charges class.
type Triggers struct {
	Store     *trigger.Store
	Intake    *trigger.Intake
	Processor *trigger.Processor
}

// newTriggers builds the store, the intake and the processor; the billing
// core must exist.
func (a *App) newTriggers() *trigger.Intake {
	obs := metrics.NewTriggers(a.Metrics.Registry, kindNames(), append(billing.TriggerOutcomes, trigger.OutcomeDuplicate), trigger.Reasons)
	log := a.log.With("component", "billing_trigger")
	store := trigger.NewStore(a.Pool)
	p := trigger.NewProcessor(store, a.Billing, trigger.ProcessorConfig{Log: log, Observer: obs})
	a.Triggers = &Triggers{Store: store, Processor: p, Intake: &trigger.Intake{Store: store, Nudge: p.Nudge, Observer: obs, Log: log}}
	return a.Triggers.Intake
}

func kindNames() []string {
	out := make([]string, 0, len(trigger.Kinds))
	for _, k := range trigger.Kinds {
		out = append(out, string(k))
	}
	return out
}

// startTriggerProcessor collects recorded triggers until ctx ends
// (through safego: a panic restarts it; a trigger in hand is leased again).
func (a *App) startTriggerProcessor(ctx context.Context, wg *sync.WaitGroup) {
	a.safe.Go(ctx, wg, "billing_trigger", a.Triggers.Processor.Run)
}

// startTriggerQueue long-polls BILLING_TRIGGERS_QUEUE_URL inside serve;
// off when it is empty. stop ends the receives and waits for the messages
// in hand.
func (a *App) startTriggerQueue(ctx context.Context) (stop func(), err error) {
	if a.Config.BillingTriggersQueueURL == "" {
		return func() {}, nil
	}
	client, err := eventbridge.NewClient(ctx, a.Config.AWSRegion, a.Config.SQSEndpoint)
	if err != nil {
		return nil, fmt.Errorf("billing triggers queue: %w", err)
	}
	log := a.log.With("component", "billing_trigger_queue")
	c := trigger.NewConsumer(trigger.QueueConfig{QueueURL: a.Config.BillingTriggersQueueURL}, client, a.Triggers.Intake, log)
	if err := c.Check(ctx); err != nil {
		// Not fatal: the queue may come later, and the receives retry.
		log.Error("billing triggers queue check failed", "error", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	log.Info("billing triggers intake running", "queue_url", a.Config.BillingTriggersQueueURL)
	go func() {
		defer close(done)
		a.safe.Loop(ctx, "billing_trigger_queue", c.Run)
	}()
	return func() { cancel(); <-done }, nil
}
