package thin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// StripeAPI makes hydration's calls to Stripe over plain HTTP: stripe-go
// v76 has no API v2 and no Stripe-Context header.
type StripeAPI struct {
	BaseURL string // STRIPE_API_BASE
	Key     string // STRIPE_API_KEY; never logged
	// HTTP defaults to a client with a 20 s timeout.
	HTTP *http.Client
}

// APIVersionV2 is the Stripe-Version sent to /v2 endpoints.
const APIVersionV2 = "2025-09-30.preview"

// maxResponse bounds what one answer may be.
const maxResponse = 4 << 20

// APIError is a non-2xx answer from Stripe.
type APIError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("stripe answered %d", e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// StatusOf is the HTTP status of a Stripe error (0 for other errors).
func StatusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// V2Event is GET /v2/core/events/{id}, with Stripe-Context when the event
// belongs to a connected account.
func (a StripeAPI) V2Event(ctx context.Context, id, stripeContext string) ([]byte, error) {
	h := http.Header{"Stripe-Version": {APIVersionV2}}
	if stripeContext != "" {
		h.Set("Stripe-Context", stripeContext)
	}
	return a.get(ctx, "/v2/core/events/"+url.PathEscape(id), h)
}

// V1Event is GET /v1/events/{id} on account ("" the platform).
func (a StripeAPI) V1Event(ctx context.Context, id, account string) ([]byte, error) {
	return a.get(ctx, "/v1/events/"+url.PathEscape(id), accountHeader(account))
}

// V1Object is GET of a v1 resource's URL (a related_object.url such as
// /v1/payment_intents/pi_…) on account.
func (a StripeAPI) V1Object(ctx context.Context, path, account string) ([]byte, error) {
	if !strings.HasPrefix(path, "/v1/") || strings.ContainsAny(path, "?#") || strings.Contains(path, "..") {
		return nil, fmt.Errorf("refusing object url %q", path)
	}
	return a.get(ctx, path, accountHeader(account))
}

func accountHeader(account string) http.Header {
	h := http.Header{}
	if account != "" {
		h.Set("Stripe-Account", account)
	}
	return h
}

func (a StripeAPI) get(ctx context.Context, path string, h http.Header) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(a.BaseURL, "/")+path, nil)
	if err != nil {
		return nil, fmt.Errorf("stripe request: %w", err)
	}
	req.Header = h
	req.Header.Set("Authorization", "Bearer "+a.Key)
	hc := a.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 20 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("GET %s: read answer: %w", path, err)
	}
	if resp.StatusCode/100 == 2 {
		return body, nil
	}
	ae := &APIError{Status: resp.StatusCode}
	var doc struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &doc) == nil {
		ae.Code, ae.Message = doc.Error.Code, truncate(doc.Error.Message, 200)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		ae.RetryAfter = time.Duration(s) * time.Second
	}
	return nil, fmt.Errorf("GET %s: %w", path, ae)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
