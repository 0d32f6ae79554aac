package poller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/webhook"
)

// Replayer drives one event through the one event handler.
type Replayer interface {
	Replay(ctx context.Context, id string, payload []byte) (stripeevent.Outcome, error)
}

// ErrPermanent marks a replay failure that retrying cannot fix (the endpoint
// refused the request, or the payload is not an event).
var ErrPermanent = errors.New("permanent replay failure")

// WebhookReplayer replays by signing the event's JSON with the endpoint
// secret, exactly as Stripe signs, and POSTing it to the webhook endpoint
// with Stripe-Payments-Source: poller. The service verifies and handles it
// like any delivery; this is the default, so replays take the same path as
// Stripe's own deliveries (body limit, signature, livemode check, metrics).
type WebhookReplayer struct {
	url    string
	secret string
	client *http.Client
	now    func() time.Time
}

// NewWebhookReplayer returns a replayer posting to url (the full
// /webhooks/stripe URL), signing with secret. client may be nil.
func NewWebhookReplayer(url, secret string, client *http.Client) *WebhookReplayer {
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	return &WebhookReplayer{url: url, secret: secret, client: client, now: time.Now}
}

// Replay implements Replayer.
func (r *WebhookReplayer) Replay(ctx context.Context, id string, payload []byte) (stripeevent.Outcome, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(payload))
	if err != nil {
		return stripeevent.Failed, fmt.Errorf("replay %s: %w: %v", id, ErrPermanent, err)
	}
	req.Header.Set("Content-Type", "application/json")
	// The signature's timestamp is the wall clock: the endpoint checks it
	// against its own clock with a 300 s tolerance.
	req.Header.Set("Stripe-Signature", webhook.Sign(payload, r.secret, r.now()))
	req.Header.Set(webhook.SourceHeader, string(stripeevent.SourcePoller))
	resp, err := r.client.Do(req)
	if err != nil {
		return stripeevent.Failed, fmt.Errorf("replay %s: post: %w", id, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		err := fmt.Errorf("replay %s: endpoint answered %d %s: %s", id, resp.StatusCode, e.Error.Code, e.Error.Message)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
			err = fmt.Errorf("%w: %w", ErrPermanent, err)
		}
		return stripeevent.Failed, err
	}
	var ok webhook.Response
	if err := json.Unmarshal(body, &ok); err != nil || ok.Outcome == "" {
		return stripeevent.Failed, fmt.Errorf("replay %s: unexpected answer %q", id, truncate(body, 200))
	}
	return stripeevent.Outcome(ok.Outcome), nil
}

// HandlerReplayer replays in-process: it parses the payload and calls the
// handler directly with source poller.
type HandlerReplayer struct {
	h stripeevent.Handler
}

// NewHandlerReplayer returns an in-process replayer.
func NewHandlerReplayer(h stripeevent.Handler) *HandlerReplayer { return &HandlerReplayer{h: h} }

// Replay implements Replayer.
func (r *HandlerReplayer) Replay(ctx context.Context, id string, payload []byte) (stripeevent.Outcome, error) {
	ev, err := stripeevent.Parse(payload)
	if err != nil {
		return stripeevent.Failed, fmt.Errorf("replay %s: %w: %w", id, ErrPermanent, err)
	}
	outcome, err := r.h.Handle(ctx, ev, payload, stripeevent.SourcePoller)
	if err != nil {
		return outcome, fmt.Errorf("replay %s: %w", id, err)
	}
	return outcome, nil
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
