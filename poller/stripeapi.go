package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/form"
	"golang.org/x/time/rate"

	"github.com/stripe-payments/stripe-payments/internal/stripeclient"
)

// APIConfig configures the Stripe Events API client.
type APIConfig struct {
	Key     string // STRIPE_API_KEY
	BaseURL string // STRIPE_API_BASE; empty means https://api.stripe.com
	// Rate is the token bucket's rate in requests per second (default 20);
	// negative means unlimited. The bucket holds one second's worth.
	Rate float64
	// MaxRateLimited is how many 429 answers in a row one page may get
	// before the listing gives up (default 8).
	MaxRateLimited int
	// MinBackoff and MaxBackoff bound the wait after a 429 (defaults 500 ms
	// and 30 s); it doubles per consecutive 429, with jitter.
	MinBackoff, MaxBackoff time.Duration
	// HTTPClient's transport is wrapped by the rate limiter; nil uses a
	// client with an 80 s timeout.
	HTTPClient *http.Client
}

// DefaultRate is Stripe's advice for bulk reads, below its 25 req/s test-mode
// and 100 req/s live-mode limits.
const DefaultRate = 20

// EventsAPI lists events from the Stripe Events API with stripe-go's backend.
//
// Every request waits for a token of a token bucket (golang.org/x/time/rate),
// applied in the HTTP transport so that stripe-go's own network retries are
// counted too. stripe-go does not retry 429 answers (only 429 lock_timeout;
// see shouldRetry in stripe-go's stripe.go), so the listing does: it waits
// with exponential backoff and jitter (or Retry-After when sent), and halves
// the bucket's rate; successful pages bring the rate back step by step
// (additive increase, multiplicative decrease).
type EventsAPI struct {
	backend stripe.Backend
	key     string
	cfg     APIConfig
	limiter *rate.Limiter
	log     *slog.Logger

	mu          sync.Mutex
	rateLimited int // 429 answers seen
}

// NewEventsAPI returns the client.
func NewEventsAPI(cfg APIConfig, log *slog.Logger) *EventsAPI {
	if cfg.Rate == 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.MaxRateLimited == 0 {
		cfg.MaxRateLimited = 8
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = stripe.APIURL
	}
	limit, burst := rate.Inf, 1
	if cfg.Rate > 0 {
		limit, burst = rate.Limit(cfg.Rate), max(1, int(cfg.Rate))
	}
	limiter := rate.NewLimiter(limit, burst)
	base := cfg.HTTPClient
	if base == nil {
		base = &http.Client{Timeout: 80 * time.Second}
	}
	hc := *base
	hc.Transport = &limitedTransport{limiter: limiter, next: transportOf(base)}
	// The poller logs the errors it acts on itself, with event and account
	// keys: stripe-go's own go to debug (without response bodies).
	backend := stripeclient.NewBackend(stripeclient.Options{
		BaseURL: cfg.BaseURL, HTTPClient: &hc, MaxNetworkRetries: 2, Log: log, QuietErrors: true,
	})
	return &EventsAPI{backend: backend, key: cfg.Key, cfg: cfg, limiter: limiter, log: log}
}

// RateLimited is the number of 429 answers seen so far.
func (a *EventsAPI) RateLimited() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rateLimited
}

// Listed is one event as the Events API listed it.
type Listed struct {
	ID      string
	Type    string
	Account string // the event's `account` field; empty on platform events
	Created int64
	Raw     []byte // the event's JSON exactly as Stripe sent it
}

// Page is one page of a listing, newest first.
type Page struct {
	Events  []Listed
	HasMore bool
}

// rawEventList keeps each event's raw JSON: replays must carry the bytes
// Stripe sent, and the stripe.Iter of the event package decodes them into
// stripe.Event and drops the bytes. It is stripe.EventList with json.RawMessage
// data, used through the same Backend.CallRaw call the event package makes.
type rawEventList struct {
	stripe.APIResource
	Object  string            `json:"object"`
	URL     string            `json:"url"`
	HasMore bool              `json:"has_more"`
	Data    []json.RawMessage `json:"data"`
}

// ListPage fetches one page of the events of account created in
// [from, until] (Unix seconds, both inclusive), newest first, after the
// cursor startingAfter (empty for the first page). connected says whether
// account is a connected account (sent as Stripe-Account) or the platform
// (no header).
func (a *EventsAPI) ListPage(ctx context.Context, account string, connected bool, from, until int64, startingAfter string, limit int64) (Page, error) {
	return a.listPage(ctx, account, connected, from, until, startingAfter, limit, false)
}

// ListUndeliveredPage is ListPage of the events whose webhook delivery has
// not succeeded (delivery_success=false: pending, or failed to an
// endpoint); Stripe filters before paging, so its pages are full.
func (a *EventsAPI) ListUndeliveredPage(ctx context.Context, account string, connected bool, from, until int64, startingAfter string, limit int64) (Page, error) {
	return a.listPage(ctx, account, connected, from, until, startingAfter, limit, true)
}

func (a *EventsAPI) listPage(ctx context.Context, account string, connected bool, from, until int64, startingAfter string, limit int64, undelivered bool) (Page, error) {
	for attempt := 0; ; attempt++ {
		page, err := a.listOnce(ctx, account, connected, from, until, startingAfter, limit, undelivered)
		if err == nil {
			a.speedUp()
			return page, nil
		}
		wait, limited := a.retryAfter(err, attempt)
		if !limited {
			return Page{}, fmt.Errorf("list events of %s: %w", account, err)
		}
		a.mu.Lock()
		a.rateLimited++
		a.mu.Unlock()
		if attempt >= a.cfg.MaxRateLimited {
			return Page{}, fmt.Errorf("list events of %s: still rate limited after %d attempts: %w", account, attempt+1, err)
		}
		a.slowDown()
		a.log.Warn("stripe rate limited the events listing; backing off",
			"stripe_account", account, "attempt", attempt+1, "wait", wait, "rate", float64(a.limiter.Limit()))
		if err := sleep(ctx, wait); err != nil {
			return Page{}, fmt.Errorf("list events of %s: %w", account, err)
		}
	}
}

func (a *EventsAPI) listOnce(ctx context.Context, account string, connected bool, from, until int64, startingAfter string, limit int64, undelivered bool) (Page, error) {
	params := &stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{
		GreaterThanOrEqual: from, LesserThanOrEqual: until,
	}}
	if undelivered {
		params.DeliverySuccess = stripe.Bool(false)
	}
	params.Context = ctx
	params.Limit = stripe.Int64(limit)
	if startingAfter != "" {
		params.StartingAfter = stripe.String(startingAfter)
	}
	if connected {
		params.SetStripeAccount(account)
	}
	values := &form.Values{}
	form.AppendTo(values, params)
	var list rawEventList
	if err := a.backend.CallRaw(http.MethodGet, "/v1/events", a.key, values, params.GetParams(), &list); err != nil {
		return Page{}, err
	}
	page := Page{HasMore: list.HasMore, Events: make([]Listed, 0, len(list.Data))}
	for _, raw := range list.Data {
		var head struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Type    string `json:"type"`
			Account string `json:"account"`
			Created int64  `json:"created"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return Page{}, fmt.Errorf("decode listed event: %w", err)
		}
		if head.Object != "event" || head.ID == "" || head.Created <= 0 {
			return Page{}, fmt.Errorf("decode listed event: not an event (object %q, id %q)", head.Object, head.ID)
		}
		page.Events = append(page.Events, Listed{ID: head.ID, Type: head.Type, Account: head.Account, Created: head.Created, Raw: raw})
	}
	return page, nil
}

// retryAfter reports whether err is a 429 rate-limit answer and how long to
// wait before the next attempt.
func (a *EventsAPI) retryAfter(err error, attempt int) (time.Duration, bool) {
	var serr *stripe.Error
	if !errors.As(err, &serr) || serr.HTTPStatusCode != http.StatusTooManyRequests {
		return 0, false
	}
	if serr.LastResponse != nil {
		if secs, perr := strconv.Atoi(serr.LastResponse.Header.Get("Retry-After")); perr == nil && secs > 0 {
			return min(time.Duration(secs)*time.Second, a.cfg.MaxBackoff), true
		}
	}
	d := a.cfg.MinBackoff << min(attempt, 16)
	if d > a.cfg.MaxBackoff || d <= 0 {
		d = a.cfg.MaxBackoff
	}
	// Full jitter on the upper half: d/2 + rand[0, d/2).
	return d/2 + rand.N(d/2+1), true
}

// slowDown halves the request rate (not below 1 req/s).
func (a *EventsAPI) slowDown() {
	if a.cfg.Rate < 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.limiter.SetLimit(max(a.limiter.Limit()/2, 1))
}

// speedUp raises the rate by a twentieth of the configured one, up to it.
func (a *EventsAPI) speedUp() {
	if a.cfg.Rate < 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur, target := a.limiter.Limit(), rate.Limit(a.cfg.Rate); cur < target {
		a.limiter.SetLimit(min(cur+target/20, target))
	}
}

type limitedTransport struct {
	limiter *rate.Limiter
	next    http.RoundTripper
}

func (t *limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.limiter.Wait(req.Context()); err != nil {
		return nil, fmt.Errorf("rate limiter: %w", err)
	}
	return t.next.RoundTrip(req)
}

func transportOf(c *http.Client) http.RoundTripper {
	if c.Transport != nil {
		return c.Transport
	}
	return http.DefaultTransport
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
