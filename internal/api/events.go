package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
)

// EventReader is the part of the events store the API reads.
type EventReader interface {
	Get(ctx context.Context, id string) (events.Record, error)
}

// Event is the JSON shape of an event record (DESIGN §4, Contract), plus
// api_version and last_error for operators.
type Event struct {
	ID            string `json:"id"`
	Type          string `json:"type"`
	StripeAccount string `json:"stripe_account"`
	Timestamp     string `json:"timestamp"`
	Date          string `json:"date"`
	Time          string `json:"time"`
	Expiration    int64  `json:"expiration"`
	Subscription  string `json:"subscription,omitempty"`
	Status        string `json:"status"`
	ReceivedAt    string `json:"received_at"`
	ProcessedAt   string `json:"processed_at,omitempty"`
	Source        string `json:"source"`
	Attempts      int    `json:"attempts"`
	APIVersion    string `json:"api_version,omitempty"`
	LastError     string `json:"last_error,omitempty"`
}

// EventJSON renders a record.
func EventJSON(r events.Record) Event {
	e := Event{
		ID: r.ID, Type: r.Type, StripeAccount: r.StripeAccount,
		Timestamp: r.Timestamp(), Date: r.Date(), Time: r.Time(),
		Expiration: r.Expiration.Unix(), Subscription: r.Subscription,
		Status: string(r.Status), ReceivedAt: r.ReceivedAt.UTC().Format(time.RFC3339Nano),
		Source: string(r.Source), Attempts: r.Attempts, APIVersion: r.APIVersion, LastError: r.LastError,
	}
	if !r.ProcessedAt.IsZero() {
		e.ProcessedAt = r.ProcessedAt.UTC().Format(time.RFC3339Nano)
	}
	return e
}

type eventRoutes struct {
	store EventReader
}

func (h eventRoutes) get(c echo.Context) error {
	id := c.Param("id")
	if id == "" || len(id) > 255 {
		return apperr.New(apperr.CodeInvalidParameter, "invalid event id")
	}
	rec, err := h.store.Get(c.Request().Context(), id)
	if errors.Is(err, events.ErrNotFound) {
		return apperr.New(apperr.CodeNotFound, "event %s not found", id)
	}
	if err != nil {
		return apperr.Wrap(err, apperr.CodeUnavailable, "could not read event")
	}
	return c.JSON(http.StatusOK, EventJSON(rec))
}
