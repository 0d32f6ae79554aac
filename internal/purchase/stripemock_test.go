package purchase_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/purchase"
	"github.com/stripe-payments/stripe-payments/internal/stripeclient"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// TestRequestShapesAgainstStripeMock sends every Stripe request the service
// makes to stripe-mock, which refuses any parameter that Stripe's OpenAPI
// spec does not accept (unknown names, wrong types or enum values). The
// fake Stripe of the end-to-end tests checks behaviour; this checks shapes.
func TestRequestShapesAgainstStripeMock(t *testing.T) {
	base := stripetest.StripeMock(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	drift := &apiVersionDrift{next: http.DefaultTransport}
	// stripe-mock takes only letters and digits after sk_test_.
	api := stripeclient.New(stripeclient.Options{APIKey: "sk_test_FAKEnotAKey123", BaseURL: base, MaxNetworkRetries: 1, Log: quiet,
		HTTPClient: &http.Client{Timeout: 10 * time.Second, Transport: drift}})
	store := tracking.NewStore(testenv.Postgres(t))
	svc := purchase.NewService(store, api, quiet)
	ctx := context.Background()

	tests := []struct {
		name string
		req  purchase.Request
	}{
		{"legacy", purchase.Request{Mode: "legacy", Amount: 2000, Currency: "usd"}},
		{"one-off", purchase.Request{Mode: "product", Customer: "cus_123", PaymentMethod: "pm_123",
			Items: []purchase.Item{{Price: "price_123", Quantity: 2}, {Price: "price_456", Quantity: 1}}}},
		{"recurring", purchase.Request{Mode: "product", Customer: "cus_123", PaymentMethod: "pm_123", RecurringPrice: "price_123"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Account = uuid.NewString()
			tc.req.StripeAccount = "acct_123"
			res, err := svc.Create(ctx, tc.req, "shape-"+tc.name)
			require.NoError(t, err, "stripe-mock refused a request shape")
			assert.Equal(t, "new", res.Purchase.Status())
		})
	}
	assert.Equal(t, int32(2), drift.rewritten.Load(), "the two invoice items went through the version translation")
	t.Run("invoice lookup", func(t *testing.T) {
		raw, err := stripeclient.InvoiceFetcher(api)(ctx, "acct_123", "in_123")
		require.NoError(t, err)
		var inv map[string]any
		require.NoError(t, json.Unmarshal(raw, &inv))
		assert.Equal(t, "invoice", inv["object"])
	})
}

// apiVersionDrift bridges the one known difference between the API version
// stripe-go v76 speaks (2023-10-16) and the spec bundled in stripe-mock
// v0.203.0 (2026-08-26.dahlia): invoice items name their price as `price`
// in ours and `pricing[price]` in the newer spec (which refuses `price`).
// Every other parameter is checked as sent.
type apiVersionDrift struct {
	next      http.RoundTripper
	rewritten atomic.Int32
}

func (d *apiVersionDrift) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/invoiceitems" && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, err
		}
		if price := form.Get("price"); price != "" {
			form.Del("price")
			form.Set("pricing[price]", price)
			d.rewritten.Add(1)
		}
		enc := []byte(form.Encode())
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(enc))
		r.ContentLength = int64(len(enc))
	}
	return d.next.RoundTrip(r)
}
