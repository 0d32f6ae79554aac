package handler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Observers tells several observers of the handler.
type Observers []Observer

// Handled implements Observer.
func (o Observers) Handled(eventType string, outcome stripeevent.Outcome, elapsed time.Duration) {
	for _, x := range o {
		x.Handled(eventType, outcome, elapsed)
	}
}

// Delivered implements DeliveryObserver for the observers that do.
func (o Observers) Delivered(source stripeevent.Source, apiVersion string, expected bool) {
	for _, x := range o {
		if d, ok := x.(DeliveryObserver); ok {
			d.Delivered(source, apiVersion, expected)
		}
	}
}

// ProblemList is the operators' list of events whose last handling failed
// or was rejected (opsdata.Problems). The ingest path declares it so that it
// feeds the list without knowing who keeps it.
type ProblemList interface {
	// Listed puts r on the list as outcome ("failed" or "rejected") with
	// msg; best effort, it returns nothing.
	Listed(ctx context.Context, r events.Record, outcome, msg string)
	// Resolve takes events off the list.
	Resolve(ctx context.Context, ids ...string) error
}

// TrackProblems wraps an event store so that failures and rejections are
// listed on list and a later successful record takes them off it.
func TrackProblems(store EventStore, list ProblemList, log *slog.Logger) EventStore {
	return trackedStore{EventStore: store, list: list, log: log}
}

type trackedStore struct {
	EventStore
	list ProblemList
	log  *slog.Logger
}

// RecordFailure records the failed record, then lists it. Listing is best
// effort: the event is re-driven by Stripe or the poller either way.
func (s trackedStore) RecordFailure(ctx context.Context, r events.Record, cause error) error {
	err := s.EventStore.RecordFailure(ctx, r, cause)
	msg := "unknown error"
	if cause != nil {
		msg = cause.Error()
	}
	s.list.Listed(ctx, r, "failed", msg)
	return err
}

// PutProcessed writes processed records, then lists the rejected ones and
// takes the re-deliveries (attempts > 1: a record existed, maybe failed)
// off the list. A first delivery that succeeds costs nothing extra. When
// the table refused some records (*events.NotWrittenError: the write-behind
// reads and writes them again), the others are written and tracked.
func (s trackedStore) PutProcessed(ctx context.Context, recs []events.Record) error {
	err := s.EventStore.PutProcessed(ctx, recs)
	var nw *events.NotWrittenError
	if err != nil && !errors.As(err, &nw) {
		return err
	}
	var refused map[string]bool
	if nw != nil {
		refused = make(map[string]bool, len(nw.IDs))
		for _, id := range nw.IDs {
			refused[id] = true
		}
	}
	var resolved []string
	for _, r := range recs {
		switch {
		case refused[r.ID]: // tracked with its own write, later
		case r.LastError != "":
			s.list.Listed(ctx, r, "rejected", r.LastError)
		case r.Attempts > 1:
			resolved = append(resolved, r.ID)
		}
	}
	if len(resolved) > 0 {
		if err := s.list.Resolve(ctx, resolved...); err != nil {
			s.log.Warn("could not take processed events off the dead-letter list", "error", err)
		}
	}
	return err
}
