// Package dispatch delivers the actions of the outbox (package actions) to
// ACTIONS_URL over HTTP: signed POSTs, retried with backoff until a 2xx
// (docs/design.md §6). It is the only part of the action path that speaks HTTP;
// the code that causes an effect only enqueues it (actions.Enqueue).
package dispatch

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
)

// Config of the dispatcher.
type Config struct {
	// URL receives every action (ACTIONS_URL); empty means actions are only
	// logged, then marked delivered.
	URL string
	// Secret signs deliveries (ACTIONS_SECRET).
	Secret string
	// HTTPClient defaults to NewHTTPClient(10 s).
	HTTPClient *http.Client
	// Backoff before attempt n+1; default outbox.DefaultBackoff (1 s
	// doubling to 10 min).
	Backoff func(attempt int) time.Duration
	// Idle is the pause between polls when nothing is due (default 500 ms).
	Idle time.Duration
	Log  *slog.Logger
	Now  func() time.Time
	// Policy: the outbox lease and dead-letter limits (zero: defaults, no
	// limits).
	Policy outbox.Policy
}

// Dispatcher delivers the actions of the outbox to ACTIONS_URL, at least
// once, in a retry loop with backoff that survives restarts (the state is the
// outbox row). Receivers deduplicate on the action id.
type Dispatcher struct {
	cfg    Config
	worker *outbox.Worker
}

// NewHTTPClient returns the client deliveries use: an overall timeout, dial
// and TLS limits, and no redirect following (a 3xx is a failed delivery).
func NewHTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: timeout,
			MaxIdleConns:          10,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// New returns a dispatcher over the outbox in pool.
func New(pool *pgxpool.Pool, cfg Config) *Dispatcher {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = NewHTTPClient(10 * time.Second)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &Dispatcher{cfg: cfg}
	d.worker = &outbox.Worker{
		Pool: pool, Topic: actions.Topic, Deliver: d.Deliver, Log: cfg.Log,
		// One message per poll: shutdown waits for at most one delivery.
		Batch: 1, Idle: cfg.Idle, Backoff: cfg.Backoff, Now: cfg.Now,
	}
	cfg.Policy.Apply(d.worker)
	return d
}

// Run delivers until ctx ends; a delivery in flight is finished first.
func (d *Dispatcher) Run(ctx context.Context) error { return d.worker.Run(ctx) }

// DeliverDue delivers what is due now (tests, one-off runs).
func (d *Dispatcher) DeliverDue(ctx context.Context) (int, error) { return d.worker.DeliverDue(ctx) }

// Deliver POSTs one action. Any answer but a 2xx is an error, so the outbox
// retries it later with the same id and body.
func (d *Dispatcher) Deliver(ctx context.Context, msg outbox.Message) error {
	log := d.cfg.Log.With("action_id", msg.ID, "action_type", msg.Type, "attempt", msg.Attempts+1)
	if d.cfg.URL == "" {
		log.Info("action (ACTIONS_URL is empty: logged only)", "action", string(msg.Payload))
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.URL, bytes.NewReader(msg.Payload))
	if err != nil {
		return fmt.Errorf("build action request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "stripe-payments-actions/1")
	req.Header.Set("Idempotency-Key", msg.ID.String())
	req.Header.Set("X-Signature", Sign(d.cfg.Secret, msg.Payload, d.cfg.Now()))
	resp, err := d.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("post action: %w", err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("post action: receiver answered %d: %s", resp.StatusCode, strings.TrimSpace(string(snippet)))
	}
	log.Info("action delivered", "status", resp.StatusCode)
	return nil
}

// Sign returns the X-Signature header of body: "t=<unix seconds>,v1=<hex
// HMAC-SHA256 of "<t>.<body>" keyed with secret>", the scheme of Stripe's
// own webhook signatures, so a receiver can refuse replays of old
// deliveries by their timestamp.
func Sign(secret string, body []byte, at time.Time) string {
	t := strconv.FormatInt(at.Unix(), 10)
	return "t=" + t + ",v1=" + mac(secret, t, body)
}

func mac(secret, t string, body []byte) string {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(t))
	h.Write([]byte("."))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Errors of Verify.
var (
	ErrBadSignature = errors.New("invalid action signature")
	ErrStale        = errors.New("action signature timestamp outside tolerance")
)

// Verify checks an X-Signature header, as a receiver should: the HMAC in
// constant time, then the timestamp within tolerance of now.
func Verify(header, secret string, body []byte, tolerance time.Duration, now time.Time) error {
	var t string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			t = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	unix, err := strconv.ParseInt(t, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrBadSignature
	}
	want := mac(secret, t, body)
	ok := false
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			ok = true
		}
	}
	if !ok {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	return nil
}
