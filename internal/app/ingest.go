package app

import (
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/billing/feedqueue"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/dispatch"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/stripeclient"
	"github.com/stripe-payments/stripe-payments/internal/thin"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// newOps builds what the console records (failed and rejected events,
// events per hour, billing runs) and the incidents.
func (a *App) newOps() {
	log := a.log.With("component", "ops")
	a.OpsProblems = opsdata.NewProblems(a.Pool, log)
	a.opsCounter = opsdata.NewCounter(a.Pool, log, nil)
	a.opsRuns = opsdata.NewRuns(a.Pool, a.Metrics.Registry)
	a.Incidents = incidents.New(a.Pool, incidents.Config{PlatformAccount: a.Config.PlatformAccount})
	a.Metrics.WatchIncidents(a.Incidents.Counts)
}

// newEvents builds the events table with its write-behind, the thin
// notifications' recorder and the processed-events ledger; newOps first.
func (a *App) newEvents() {
	cfg := a.Config
	table := events.NewStore(a.Dynamo, cfg.EventsTable, cfg.EventTTL, nil)
	if cfg.IngestRecords.FreshWrite == "item" {
		table = table.WithItemPuts()
	}
	a.recordMetrics = a.Metrics.NewRecords()
	// The write-behind writes through the failed & rejected list
	// (handler.TrackProblems), as the handler does: a re-driven event leaves
	// it when its processed record is written.
	a.Records = recordq.New(a.Pool, handler.TrackProblems(table, a.OpsProblems, a.log.With("component", "ops")), recordq.Config{
		Writers: cfg.IngestRecords.Writers, MaxBacklog: cfg.IngestRecords.Backlog, Linger: cfg.IngestRecords.Linger,
		MaxBacklogBytes: cfg.IngestRecords.BacklogBytes, QuarantineAfter: cfg.IngestRecords.QuarantineAfter,
		Log: a.log.With("component", "records"), Observer: a.recordMetrics, Safe: a.safe,
	})
	// Queued thin notifications are read from their queue until their
	// records are written behind the answer (thin.Recorder).
	a.ThinRecords = &thin.Recorder{Queue: thin.NewQueue(a.Pool), Table: table, PlatformAccount: cfg.PlatformAccount, EventTTL: cfg.EventTTL}
	// Failures and rejections written through a.Events are marked for the
	// write-behind (events.Marker): the joined Pending does not pass Mark on.
	a.Events = table.WithPending(events.JoinPending(a.Records, a.ThinRecords)).WithMarker(a.Records)
	a.ledger = ledger.New(a.Pool)
}

// newHandler builds the state machines, the actions dispatcher and the one
// event handler over the route table (changed by the tests' WithRoutes);
// newEvents, newStripe and newBilling first.
func (a *App) newHandler(changes []func(handler.Routes) handler.Routes) error {
	cfg, log := a.Config, a.log
	a.tracking = tracking.NewStore(a.Pool)
	a.Actions = dispatch.New(a.Pool, dispatch.Config{URL: cfg.ActionsURL, Secret: cfg.ActionsSecret, Log: log.With("component", "actions"), Policy: a.outboxPolicy()})
	flows := tracking.NewFlows(tracking.FlowsConfig{Log: log, Invoices: stripeclient.InvoiceFetcher(a.stripe), Processed: a.ledger.Processed})
	routes := handler.NewRoutes(flows, feedqueue.Enqueue)
	for _, change := range changes {
		routes = change(routes)
	}
	if err := routes.Check(); err != nil {
		return fmt.Errorf("event routes: %w", err)
	}
	a.Handler = handler.New(handler.Config{
		PlatformAccount: cfg.PlatformAccount,
		EventTTL:        cfg.EventTTL,
		Livemode:        cfg.Livemode(),
		APIVersion:      cfg.StripeAPIVersion,
		MaxBatch:        cfg.IngestMaxBatch,
		Flushers:        cfg.IngestFlushers,
		DeliveryTimeout: cfg.Limits.IngestTimeout,
		BatchTimeout:    cfg.Limits.IngestBatchTimeout,
		QueueMax:        cfg.Limits.IngestQueueMax,
		QueueMaxBytes:   cfg.Limits.IngestQueueMaxBytes,
	}, handler.TrackProblems(a.Events, a.OpsProblems, log.With("component", "ops")), a.ledger, log,
		append([]handler.Option{handler.WithRoutes(routes),
			handler.WithObserver(handler.Observers{a.Metrics, a.opsCounter}), handler.WithIngestObserver(a.Metrics),
			handler.WithBatchObserver(a.recordMetrics)}, recordOptions(cfg, a.Records)...)...)
	a.Metrics.WatchIngest(func() metrics.IngestQueue { return metrics.IngestQueue(a.Handler.Stats()) })
	return nil
}

// recordOptions leaves event records to the write-behind when configured
// (INGEST_WRITE_BEHIND, on by default). The queue's writers run in serve
// only: elsewhere (poll --in-process) the handler writes records itself.
func recordOptions(cfg config.Config, q *recordq.Queue) []handler.Option {
	if !cfg.IngestRecords.WriteBehind {
		return nil
	}
	return []handler.Option{handler.WithRecordQueue(q)}
}
