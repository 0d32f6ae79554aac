package app

import (
	"context"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/email"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/retention"
)

// outboxTopics are the topics the code writes: their gauges read 0 rather
// than vanish when a topic has nothing pending.
var outboxTopics = []string{actions.Topic, billing.FeedTopic, email.Topic}

// Housekeeping cadence: the backlog gauges and the prune batch size.
const (
	outboxStatsEvery = 15 * time.Second
	pruneBatch       = 1000
)

// newOutbox builds the outbox store and metrics; outboxPolicy then gives
// every worker the configured lease and dead-letter limits.
func (a *App) newOutbox() {
	a.outboxMetrics = metrics.NewOutbox(a.Metrics.Registry)
	a.outbox = outbox.NewStore(a.Pool, a.log.With("component", "outbox"), nil)
}

func (a *App) outboxPolicy() outbox.Policy {
	c := a.Config.Outbox
	return outbox.Policy{Lease: c.Lease, MaxAttempts: c.MaxAttempts, MaxAge: c.MaxAge,
		OnDead: func(topic string) { a.outboxMetrics.DeadLettered.WithLabelValues(topic).Inc() }}
}

// startOutboxHousekeeping refreshes the backlog gauges every 15 s and, with
// PRUNE_EVERY set, prunes delivered outbox rows and old ledger rows at start
// and then on that period, until ctx ends. Every replica does both: the
// queries are cheap and the deletes skip rows another replica is deleting.
func (a *App) startOutboxHousekeeping(ctx context.Context, wg *sync.WaitGroup) {
	a.safe.Go(ctx, wg, "outbox_stats", func(ctx context.Context) { every(ctx, outboxStatsEvery, a.refreshOutboxStats) })
	if p := a.Config.Outbox.PruneEvery; p > 0 {
		a.safe.Go(ctx, wg, "prune", func(ctx context.Context) { every(ctx, p, a.prune) })
	}
}

// every runs f at once and then every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *App) refreshOutboxStats(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := a.outbox.Stats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("outbox figures not refreshed", "error", err)
		}
		return
	}
	m := a.outboxMetrics
	for _, topic := range outboxTopics {
		m.Pending.WithLabelValues(topic).Set(0)
		m.OldestAge.WithLabelValues(topic).Set(0)
		m.Dead.WithLabelValues(topic).Set(0)
	}
	for _, s := range st {
		m.Pending.WithLabelValues(s.Topic).Set(float64(s.Pending))
		m.OldestAge.WithLabelValues(s.Topic).Set(s.OldestPending.Seconds())
		m.Dead.WithLabelValues(s.Topic).Set(float64(s.Dead))
	}
}

// prune deletes delivered outbox rows past OUTBOX_RETENTION and ledger rows
// past LEDGER_RETENTION (ledger.Prune says why that bound is safe),
// then dead letters, quarantined records and the console's rows past
// DEAD_LETTER_RETENTION and OPS_RETENTION (package retention).
func (a *App) prune(ctx context.Context) {
	c := a.Config.Outbox
	n, err := a.outbox.PruneDelivered(ctx, c.Retention, pruneBatch)
	a.outboxMetrics.Pruned.WithLabelValues("outbox").Add(float64(n))
	if err != nil && ctx.Err() == nil {
		a.log.Error("outbox prune failed", "error", err)
	}
	l, err := ledger.Prune(ctx, a.Pool, time.Now().Add(-c.LedgerRetention), pruneBatch)
	a.outboxMetrics.Pruned.WithLabelValues("processed_events").Add(float64(l))
	if err != nil && ctx.Err() == nil {
		a.log.Error("ledger prune failed", "error", err)
	}
	if n+l > 0 {
		a.log.Info("pruned rows past retention", "outbox", n, "processed_events", l)
	}
	r := a.Config.Retention
	err = retention.Prune(ctx, a.Pool, time.Now(), retention.Rules(r.DeadLetters, r.Ops, a.Config.EventTTL), pruneBatch, func(name string, n int64) {
		a.outboxMetrics.Pruned.WithLabelValues(name).Add(float64(n))
		if n > 0 {
			a.log.Info("pruned rows past retention", "rows", name, "count", n)
		}
	})
	if err != nil && ctx.Err() == nil {
		a.log.Error("retention prune failed", "error", err)
	}
}

// newEmails builds the reminder emails' worker (outbox topic "email")
// when SES_FROM_ADDRESS is set.
func (a *App) newEmails(ctx context.Context) error {
	cfg := a.Config
	if cfg.SESFromAddress == "" {
		return nil
	}
	ses, err := email.NewSESClient(ctx, cfg.AWSRegion, cfg.SESEndpoint)
	if err != nil {
		return err
	}
	sender := email.Sender{Client: ses, From: cfg.SESFromAddress, ConfigurationSet: cfg.SESConfigurationSet}
	a.emails = &outbox.Worker{Pool: a.Pool, Topic: email.Topic, Deliver: sender.Deliver, Log: a.log.With("component", "email")}
	a.outboxPolicy().Apply(a.emails)
	return nil
}
