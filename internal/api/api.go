package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/api/openapi"
	"github.com/stripe-payments/stripe-payments/internal/authlimit"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/replay"
)

// Prefix of every internal route.
const Prefix = "/internal/v1"

// Deps are what the API reads and drives.
type Deps struct {
	Events events.Reader
	// Replayer re-drives one event (the console replays through the same).
	Replayer replay.One
	// Tracking and Purchases; nil leaves their routes out.
	Tracking  TrackingReader
	Purchases PurchaseService
	Billing   BillingService // nil: no billing routes
	// TestClocks serves the test-clock routes (nil: none).
	TestClocks TestClocks
	Outbox     OutboxAdmin     // nil: no outbox routes
	Incidents  IncidentService // nil: no incident routes
	Replays    *Replays        // nil: no bulk replay routes
	Batches    *Batches        // nil: no batch collection routes
	Triggers   TriggerService  // nil: no billing trigger routes
	// QueueRuns: the billing queue's run progress (nil: no route).
	QueueRuns QueueRunReader
	// Reconciliations: the reconciliation routes (nil: none).
	Reconciliations *Reconciliations
	// Livemode: STRIPE_API_KEY is a live key; the test-clock routes answer
	// 403 livemode.
	Livemode bool
	// Background bounds work that outlives its request (a test clock's
	// advance): the process's lifetime. nil: context.Background().
	Background context.Context
	// AdvanceWait is how long an advance request waits before answering
	// 202 (0: AdvanceWait, docs/design.md's 10 s).
	AdvanceWait time.Duration
	// Failures limits wrong bearer tokens per client address (nil: no
	// limit); Log receives the refusals (nil: discarded).
	Failures *authlimit.Limiter
	Log      *slog.Logger
}

// Register mounts the internal API on e behind bearer auth. An empty token
// disables the routes entirely (docs/design.md §3).
func Register(e *echo.Echo, token string, deps Deps) {
	e.Use(limitBodies(MaxBody, Prefix, PurchasePrefix))

	if token == "" {
		return
	}
	auth := BearerAuth(token, deps.Failures, deps.Log)
	g := router{g: e.Group(Prefix), auth: auth}
	g.GET("/openapi.json", func(c echo.Context) error {
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openapi.Document)
	})
	ev := eventRoutes{store: deps.Events, replayer: deps.Replayer}
	g.GET("/events", ev.list)
	g.GET("/events/:id", ev.get)
	g.POST("/events/:id/replay", ev.replay)
	registerTracking(g, deps.Tracking)
	registerPurchases(e, auth, deps.Purchases)
	if deps.Billing != nil {
		registerBilling(g, deps.Billing)
	}
	if deps.TestClocks != nil {
		background := deps.Background
		if background == nil {
			background = context.Background()
		}
		wait := deps.AdvanceWait
		if wait <= 0 {
			wait = AdvanceWait
		}
		registerTestClocks(g, deps.TestClocks, deps.Livemode, background, wait)
	}
	registerOutbox(g, deps.Outbox)
	registerIncidents(g, deps.Incidents)
	registerReplays(g, deps.Replays)
	registerBatches(g, deps.Batches)
	registerTriggers(g, deps.Triggers)
	registerReconciliations(g, deps.Reconciliations)
	registerQueueRuns(g, deps.QueueRuns)
}

// router mounts routes with the bearer check as route middleware rather than
// group middleware: echo gives a group with middleware a catch-all route,
// which would answer a wrong method with 404 instead of 405.
type router struct {
	g    *echo.Group
	auth echo.MiddlewareFunc
}

func (r router) GET(path string, h echo.HandlerFunc)    { r.g.GET(path, h, r.auth) }
func (r router) POST(path string, h echo.HandlerFunc)   { r.g.POST(path, h, r.auth) }
func (r router) PATCH(path string, h echo.HandlerFunc)  { r.g.PATCH(path, h, r.auth) }
func (r router) DELETE(path string, h echo.HandlerFunc) { r.g.DELETE(path, h, r.auth) }
