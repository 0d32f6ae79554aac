package stripebudget

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Transport draws on the budget for every request it sends: wrap the
// http.Client that stripe-go's backend uses (stripeclient.Options.HTTPClient)
// and every call, stripe-go's own network retries included, waits for a
// slot. A request's class is the one its context carries (WithClass), else
// Default. A 429 pauses every replica (Budget.RateLimited) and is returned
// to the caller as it came: the caller's retry waits for a slot again, so
// nothing retries in a tight loop. An answer with Idempotent-Replayed: true
// is logged and counted (the caller sees the object it already created).
type Transport struct {
	Budget  *Shared
	Default Class
	Next    http.RoundTripper // nil: http.DefaultTransport
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	c := ClassOf(ctx, t.Default)
	if err := t.Budget.Wait(ctx, c); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	next := t.Next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		t.Budget.RateLimited(ctx, c, retryAfter(resp.Header.Get("Retry-After")))
	}
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		t.Budget.obs.Replayed(c)
		// The path names objects, never secrets; the key is an opaque id.
		t.Budget.log.Info("stripe replayed an idempotent request: the answer is the first one's, nothing new happened",
			"method", req.Method, "path", req.URL.Path, "idempotency_key", req.Header.Get("Idempotency-Key"),
			"stripe_account", req.Header.Get("Stripe-Account"), "request_id", resp.Header.Get("Request-Id"), "class", c.String())
	}
	return resp, nil
}

// Client returns a copy of base (nil: a client with a 30 s timeout) whose
// transport draws on b with default class def.
func (b *Shared) Client(base *http.Client, def Class) *http.Client {
	if base == nil {
		base = &http.Client{Timeout: 30 * time.Second}
	}
	hc := *base
	hc.Transport = &Transport{Budget: b, Default: def, Next: base.Transport}
	return &hc
}

// retryAfter reads a Retry-After of whole seconds (Stripe's form); 0 when
// absent or malformed.
func retryAfter(v string) time.Duration {
	secs, err := strconv.Atoi(v)
	if err != nil || secs <= 0 {
		return 0
	}
	return time.Duration(secs) * time.Second
}
