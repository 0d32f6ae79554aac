package webhook

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/ingest"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Path is where Stripe delivers events (docs/design.md §4, Contract).
const Path = "/webhooks/stripe"

// SourceHeader lets a signed replay (the poller) say where it comes from. It
// is honoured only on a request whose signature verified.
const SourceHeader = "Stripe-Payments-Source"

// RetryAfter is the Retry-After (seconds) of a 503: a full queue drains in
// moments, a dependency outage is retried on the sender's schedule anyway.
const RetryAfter = "5"

// Ingester takes a verified event body, snapshot or thin (ingest.Intake).
type Ingester interface {
	Ingest(ctx context.Context, body []byte, source stripeevent.Source) (ingest.Result, error)
}

// Endpoint serves POST /webhooks/stripe.
type Endpoint struct {
	verifier *Verifier
	ingester Ingester
	maxBody  int64
	log      *slog.Logger
}

// NewEndpoint returns the endpoint. maxBody bounds the request body (1 MiB).
func NewEndpoint(v *Verifier, in Ingester, maxBody int64, log *slog.Logger) *Endpoint {
	return &Endpoint{verifier: v, ingester: in, maxBody: maxBody, log: log}
}

// Register adds the route to e.
func (ep *Endpoint) Register(e *echo.Echo) {
	e.POST(Path, ep.serve)
}

// Response is the body of a 200 answer.
type Response struct {
	Received bool   `json:"received"`
	EventID  string `json:"event_id"`
	Outcome  string `json:"outcome"`
	// PayloadKind is snapshot or thin; a thin event's outcome is
	// "received" (hydrated after the answer).
	PayloadKind string `json:"payload_kind"`
}

func (ep *Endpoint) serve(c echo.Context) error {
	req := c.Request()
	// No signature, no read: a request whose header no body could verify
	// against (absent, malformed, without a v1 signature) costs no body
	// buffer.
	if _, err := CheckHeader(req.Header.Get("Stripe-Signature")); err != nil {
		return verificationError(err)
	}
	if req.ContentLength > ep.maxBody {
		return apperr.New(apperr.CodePayloadTooLarge, "body exceeds %d bytes", ep.maxBody)
	}
	payload, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, ep.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return apperr.New(apperr.CodePayloadTooLarge, "body exceeds %d bytes", ep.maxBody)
		}
		return apperr.Wrap(err, apperr.CodeInvalidEvent, "could not read body")
	}
	if err := ep.verifier.Verify(payload, req.Header.Get("Stripe-Signature")); err != nil {
		return verificationError(err)
	}
	source := stripeevent.SourceWebhook
	if s := stripeevent.Source(req.Header.Get(SourceHeader)); s != "" {
		if !s.Valid() {
			return apperr.Invalid("unknown %s %q", SourceHeader, s)
		}
		source = s
	}
	res, err := ep.ingester.Ingest(req.Context(), payload, source)
	if ingest.Malformed(err) {
		return apperr.Wrap(err, apperr.CodeInvalidEvent, "%s", err.Error())
	}
	if err != nil {
		// 503 so that Stripe delivers the event again; Retry-After for
		// senders that honour it (Stripe keeps its own schedule).
		c.Response().Header().Set("Retry-After", RetryAfter)
		if errors.Is(err, stripeevent.ErrOverloaded) {
			return apperr.Wrap(err, apperr.CodeUnavailable, "ingest queue full; event %s will be retried", res.EventID)
		}
		return apperr.Wrap(err, apperr.CodeUnavailable, "event %s could not be processed; it will be retried", res.EventID)
	}
	return c.JSON(http.StatusOK, Response{Received: true, EventID: res.EventID, Outcome: string(res.Outcome), PayloadKind: string(res.Kind)})
}

func verificationError(err error) error {
	switch {
	case errors.Is(err, ErrMissingSignature):
		return apperr.New(apperr.CodeMissingSignature, "missing Stripe-Signature header")
	case errors.Is(err, ErrOutsideTolerance):
		return apperr.New(apperr.CodeTimestampTolerance, "signature timestamp is outside the tolerance")
	case errors.Is(err, ErrMalformedHeader):
		return apperr.New(apperr.CodeInvalidSignature, "malformed Stripe-Signature header")
	default:
		return apperr.New(apperr.CodeInvalidSignature, "no valid signature for this endpoint")
	}
}
