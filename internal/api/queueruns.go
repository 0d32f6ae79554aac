package api

import (
	"context"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billingqueue"
)

// QueueRunReader reads a queued collection run's progress
// (opsdata.QueueRuns).
type QueueRunReader interface {
	Progress(ctx context.Context, run string) (billingqueue.Progress, error)
}

// QueueRunJSON is a queued collection run's progress across replicas
// (docs/billing.md, Billing queue).
type QueueRunJSON struct {
	ID           string              `json:"id"`
	Job          string              `json:"job"`
	Date         string              `json:"date"`
	TestClock    *string             `json:"test_clock"`
	StartedAt    string              `json:"started_at"`
	Deadline     string              `json:"deadline"`
	Status       string              `json:"status"`
	Enqueued     int                 `json:"enqueued"`
	EnqueueDone  bool                `json:"enqueue_done"`
	EnqueueError *string             `json:"enqueue_error"`
	Collected    int                 `json:"collected"`
	NothingDue   int                 `json:"nothing_due"`
	Locked       int                 `json:"locked"`
	Incomplete   int                 `json:"incomplete"`
	Dead         int                 `json:"dead"`
	Failed       int                 `json:"failed"`
	Replicas     int                 `json:"replicas"`
	Counts       billingqueue.Counts `json:"counts"`
}

// QueueRunStatus names a run's state: enqueuing, draining, drained,
// superseded or overdue.
func QueueRunStatus(p billingqueue.Progress, now time.Time) string {
	switch {
	case p.Drained:
		return "drained"
	case p.Superseded:
		return "superseded"
	case now.After(p.Deadline):
		return "overdue"
	case !p.EnqueueDone:
		return "enqueuing"
	}
	return "draining"
}

// QueueRunToJSON renders a run's progress.
func QueueRunToJSON(p billingqueue.Progress, now time.Time) QueueRunJSON {
	out := QueueRunJSON{ID: p.ID, Job: p.Job, Date: p.Date.String(), StartedAt: p.Started.UTC().Format(time.RFC3339Nano),
		Deadline: p.Deadline.UTC().Format(time.RFC3339), Status: QueueRunStatus(p, now), Enqueued: p.Enqueued,
		EnqueueDone: p.EnqueueDone, Collected: p.Collected, NothingDue: p.NothingDue, Locked: p.Locked, Incomplete: p.Incomplete,
		Dead: p.Dead, Failed: p.Failed(), Replicas: p.Replicas, Counts: p.Counts}
	if p.Clock != "" {
		out.TestClock = &p.Clock
	}
	if p.EnqueueError != "" {
		out.EnqueueError = &p.EnqueueError
	}
	return out
}

func registerQueueRuns(g router, r QueueRunReader) {
	if r == nil {
		return
	}
	g.GET("/billing/queue-runs/:id", func(c echo.Context) error {
		if _, err := requestParams(c); err != nil {
			return err
		}
		id := c.Param("id")
		if _, err := uuid.Parse(id); err != nil {
			return apperr.Invalid("id: a queued run's id (a UUID, the report's queue.run)")
		}
		p, err := r.Progress(c.Request().Context(), id)
		if err != nil {
			return apperr.Ensure(err, apperr.CodeUnavailable, "could not read the queued run")
		}
		return c.JSON(http.StatusOK, QueueRunToJSON(p, time.Now()))
	})
}
