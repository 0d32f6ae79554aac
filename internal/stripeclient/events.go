package stripeclient

import (
	"context"
	"errors"
	"net/http"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// EventFetcher reads single events from Stripe's Events API.
type EventFetcher struct {
	API             *client.API
	PlatformAccount string
}

// FetchEvent returns the raw JSON of event id. account is the connected
// account that owns it; empty or the platform's own id reads the platform's.
func (f EventFetcher) FetchEvent(ctx context.Context, id, account string) ([]byte, error) {
	params := &stripe.EventParams{}
	params.Context = ctx
	if account != "" && account != f.PlatformAccount {
		params.SetStripeAccount(account)
	}
	ev, err := f.API.Events.Get(id, params)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
			return nil, apperr.Wrap(err, apperr.CodeNotFound, "event %s is not in the table and Stripe does not know it (events older than 30 days are gone)", id)
		}
		return nil, apperr.Wrap(err, apperr.CodeUpstream, "could not fetch event %s from Stripe", id)
	}
	if ev.LastResponse == nil || len(ev.LastResponse.RawJSON) == 0 {
		return nil, apperr.New(apperr.CodeUpstream, "Stripe answered event %s without a body", id)
	}
	return ev.LastResponse.RawJSON, nil
}
