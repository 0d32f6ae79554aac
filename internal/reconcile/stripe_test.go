package reconcile

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The reader lists in pages of 100 with Stripe's created window and
// starting_after cursor, asks on the connected account (never on the
// platform's own), retries a 429 after Stripe's Retry-After, and tells a
// revoked account apart from an error.
func TestHTTPReaderSpeaksStripesList(t *testing.T) {
	var mu sync.Mutex
	var seen []*http.Request
	throttled := 1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r)
		throttle := throttled > 0 && r.URL.Path == "/v1/payment_intents"
		if throttle {
			throttled--
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case throttle:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Request rate limit exceeded."}}`)
		case r.URL.Path == "/v1/payment_intents":
			// 150 objects, newest first: pi_149 … pi_0.
			start := 149
			if after := r.URL.Query().Get("starting_after"); after != "" {
				n, _ := strconv.Atoi(after[len("pi_"):])
				start = n - 1
			}
			limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
			fmt.Fprint(w, `{"object":"list","url":"/v1/payment_intents","data":[`)
			n := 0
			for i := start; i >= 0 && n < limit; i-- {
				if n > 0 {
					fmt.Fprint(w, ",")
				}
				fmt.Fprintf(w, `{"id":"pi_%d","object":"payment_intent","status":"succeeded"}`, i)
				n++
			}
			fmt.Fprintf(w, `],"has_more":%t}`, start-n >= 0)
		case r.URL.Path == "/v1/accounts/acct_gone":
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"account_invalid","message":"The provided key does not have access to account 'acct_gone' (or that account does not exist). Application access may have been revoked."}}`)
		case r.URL.Path == "/v1/accounts/acct_here":
			fmt.Fprint(w, `{"id":"acct_here","object":"account"}`)
		default:
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"error":{"type":"api_error","message":"boom"}}`)
		}
	}))
	t.Cleanup(srv.Close)
	reader := HTTPReader{Client: srv.Client(), Key: "sk_test_reader", BaseURL: srv.URL, Platform: "acct_platform",
		MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Second}
	ctx := context.Background()
	from, to := time.Unix(1_700_000_000, 0), time.Unix(1_700_086_400, 0)

	started := time.Now()
	got, err := reader.List(ctx, KindPaymentIntent, "acct_1", from, to)
	require.NoError(t, err)
	assert.Len(t, got, 150)
	assert.GreaterOrEqual(t, time.Since(started), time.Second, "the 429's Retry-After was waited")
	mu.Lock()
	pages := seen
	seen = nil
	mu.Unlock()
	require.Len(t, pages, 3, "the 429, then two pages")
	for _, r := range pages {
		q := r.URL.Query()
		assert.Equal(t, "100", q.Get("limit"))
		assert.Equal(t, "1700000000", q.Get("created[gte]"))
		assert.Equal(t, "1700086400", q.Get("created[lte]"))
		assert.Equal(t, "acct_1", r.Header.Get("Stripe-Account"))
		assert.Equal(t, "Bearer sk_test_reader", r.Header.Get("Authorization"))
	}
	assert.Equal(t, "pi_50", pages[2].URL.Query().Get("starting_after"))

	_, err = reader.List(ctx, KindPaymentIntent, "acct_platform", from, to)
	require.NoError(t, err)
	mu.Lock()
	assert.Empty(t, seen[0].Header.Get("Stripe-Account"), "the platform's own objects are read without Stripe-Account")
	seen = nil
	mu.Unlock()

	gone, err := reader.Retrieve(ctx, KindAccount, "acct_gone", "acct_gone")
	require.NoError(t, err)
	assert.Nil(t, gone, "403 account_invalid: revoked")
	here, err := reader.Retrieve(ctx, KindAccount, "acct_here", "acct_here")
	require.NoError(t, err)
	assert.NotNil(t, here)
	mu.Lock()
	for _, r := range seen {
		assert.Empty(t, r.Header.Get("Stripe-Account"), "the platform asks about its connected accounts")
	}
	mu.Unlock()

	_, err = reader.Retrieve(ctx, KindPaymentIntent, "acct_1", "pi_x")
	assert.ErrorContains(t, err, "500", "a 5xx after the retries is an error, not a missing object")
	_, err = reader.Retrieve(ctx, KindPaymentIntent, "acct_1", "pi_/../x")
	assert.ErrorContains(t, err, "not a payment_intent id", "no arbitrary string in a Stripe path")
}
