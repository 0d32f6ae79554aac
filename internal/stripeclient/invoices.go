package stripeclient

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
)

// InvoiceFetcher returns a function that reads an invoice from Stripe on a
// connected account ("" for the platform) and returns its raw JSON; it has
// the shape of tracking.InvoiceFetcher. ctx bounds the call, retries included.
func InvoiceFetcher(api *client.API) func(ctx context.Context, stripeAccount, invoiceID string) (json.RawMessage, error) {
	return func(ctx context.Context, stripeAccount, invoiceID string) (json.RawMessage, error) {
		params := &stripe.InvoiceParams{}
		params.Context = ctx
		if stripeAccount != "" {
			params.SetStripeAccount(stripeAccount)
		}
		inv, err := api.Invoices.Get(invoiceID, params)
		if err != nil {
			return nil, fmt.Errorf("get invoice %s: %w", invoiceID, err)
		}
		if inv.LastResponse == nil || len(inv.LastResponse.RawJSON) == 0 {
			return nil, fmt.Errorf("get invoice %s: empty response", invoiceID)
		}
		return json.RawMessage(inv.LastResponse.RawJSON), nil
	}
}
