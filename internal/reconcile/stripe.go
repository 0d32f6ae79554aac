package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// StripeReader reads Stripe's objects as raw JSON, so the snapshot event
// carries exactly what Stripe answered.
type StripeReader interface {
	// List returns account's objects of kind created within [from, to],
	// by id.
	List(ctx context.Context, kind, account string, from, to time.Time) (map[string]json.RawMessage, error)
	// Retrieve returns one object; nil when Stripe has no such object (for
	// an account: none the platform may access, i.e. deauthorized).
	Retrieve(ctx context.Context, kind, account, id string) (json.RawMessage, error)
}

// HTTPReader is the StripeReader over Stripe's API: list calls with a
// `created` window and 100 objects a page, retrieves otherwise. Every
// request is at the budget's background class (docs/design.md §9); a 429
// (which the budget's transport has already turned into a pause of every
// replica) is retried after a growing wait, never in a tight loop.
type HTTPReader struct {
	// Client must draw on the shared budget (stripebudget.Shared.Client).
	Client   *http.Client
	Key      string
	BaseURL  string // STRIPE_API_BASE; empty: https://api.stripe.com
	Platform string // STRIPE_PLATFORM_ACCOUNT: its objects are read without Stripe-Account
	// MaxAttempts bounds the tries of one request on 429 and 5xx answers
	// (0: 12); MinBackoff and MaxBackoff bound the wait between them (0:
	// 500 ms and 30 s), doubling with jitter, or Stripe's Retry-After.
	MaxAttempts            int
	MinBackoff, MaxBackoff time.Duration
}

var paths = map[string]string{
	KindPaymentIntent:  "/v1/payment_intents",
	KindSubscription:   "/v1/subscriptions",
	KindBillingAttempt: "/v1/payment_intents",
	KindAccount:        "/v1/accounts",
}

var prefixes = map[string]string{KindPaymentIntent: "pi_", KindSubscription: "sub_", KindBillingAttempt: "pi_", KindAccount: "acct_"}

// List implements StripeReader.
func (r HTTPReader) List(ctx context.Context, kind, account string, from, to time.Time) (map[string]json.RawMessage, error) {
	if paths[kind] == "" {
		return nil, fmt.Errorf("list: no Stripe object for kind %q", kind)
	}
	out := map[string]json.RawMessage{}
	q := url.Values{}
	q.Set("limit", "100")
	q.Set("created[gte]", strconv.FormatInt(from.Unix(), 10))
	q.Set("created[lte]", strconv.FormatInt(to.Unix(), 10))
	if kind == KindSubscription {
		q.Set("status", "all") // Stripe leaves canceled subscriptions out otherwise
	}
	for page := 0; ; page++ {
		body, status, err := r.get(ctx, account, paths[kind], q)
		if err != nil {
			return nil, err
		}
		if status != http.StatusOK {
			return nil, fmt.Errorf("list %s of %s: Stripe answered %d: %s", paths[kind], account, status, clip(string(body)))
		}
		var list struct {
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("list %s of %s: %w", paths[kind], account, err)
		}
		last := ""
		for _, raw := range list.Data {
			var o stripeObject
			if err := json.Unmarshal(raw, &o); err != nil || !stripeid.Valid(o.ID, prefixes[kind]) {
				return nil, fmt.Errorf("list %s of %s: an item is not a %s", paths[kind], account, kind)
			}
			out[o.ID], last = raw, o.ID
		}
		if !list.HasMore || last == "" {
			return out, nil
		}
		q.Set("starting_after", last)
	}
}

// Retrieve implements StripeReader.
func (r HTTPReader) Retrieve(ctx context.Context, kind, account, id string) (json.RawMessage, error) {
	if paths[kind] == "" || !stripeid.Valid(id, prefixes[kind]) {
		return nil, fmt.Errorf("retrieve %s: %q is not a %s id", kind, clip(id), kind)
	}
	if kind == KindAccount {
		account = "" // the platform asks about its connected account
	}
	body, status, err := r.get(ctx, account, paths[kind]+"/"+id, nil)
	switch {
	case err != nil:
		return nil, err
	case status == http.StatusNotFound:
		return nil, nil
	case kind == KindAccount && revoked(status, body):
		return nil, nil
	case status != http.StatusOK:
		return nil, fmt.Errorf("retrieve %s of %s: Stripe answered %d: %s", id, account, status, clip(string(body)))
	}
	return body, nil
}

// revoked reports Stripe's answer to a platform that lost access to a
// connected account (it deauthorized the platform): 401 or 403 with code
// account_invalid ("does not have access to account").
func revoked(status int, body []byte) bool {
	if status != http.StatusForbidden && status != http.StatusUnauthorized {
		return false
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error.Code == "account_invalid"
}

// get sends one GET, retrying 429 and 5xx answers and network errors.
func (r HTTPReader) get(ctx context.Context, account, path string, q url.Values) ([]byte, int, error) {
	base := r.BaseURL
	if base == "" {
		base = stripe.APIURL
	}
	u := strings.TrimRight(base, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	attempts, wait, maxWait := r.MaxAttempts, r.MinBackoff, r.MaxBackoff
	if attempts <= 0 {
		attempts = 12
	}
	if wait <= 0 {
		wait = 500 * time.Millisecond
	}
	if maxWait <= 0 {
		maxWait = 30 * time.Second
	}
	ctx = stripebudget.WithClass(ctx, stripebudget.Background)
	var lastErr error
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, 0, fmt.Errorf("GET %s: %w", path, err)
		}
		req.Header.Set("Authorization", "Bearer "+r.Key)
		req.Header.Set("Stripe-Version", stripe.APIVersion)
		if account != "" && account != r.Platform {
			req.Header.Set("Stripe-Account", account)
		}
		pause := time.Duration(0)
		resp, err := r.Client.Do(req)
		if err == nil {
			body, rerr := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
			_ = resp.Body.Close()
			switch {
			case rerr != nil:
				lastErr = fmt.Errorf("GET %s: read answer: %w", path, rerr)
			case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
				lastErr = fmt.Errorf("GET %s: Stripe answered %d", path, resp.StatusCode)
				if s, _ := strconv.Atoi(resp.Header.Get("Retry-After")); s > 0 {
					pause = time.Duration(s) * time.Second
				}
			default:
				return body, resp.StatusCode, nil
			}
		} else {
			lastErr = fmt.Errorf("GET %s: %w", path, err)
		}
		if ctx.Err() != nil || attempt >= attempts {
			return nil, 0, lastErr
		}
		if pause == 0 {
			pause = wait/2 + rand.N(wait/2+1) // jitter: replicas do not retry in step
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(min(pause, maxWait)):
		}
		wait = min(2*wait, maxWait)
	}
}
