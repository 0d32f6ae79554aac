// Package webhook is the Stripe webhook endpoint: body limit, signature
// check, event decoding, hand-off to the one event handler.
package webhook

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"
)

// Verification errors.
var (
	ErrMissingSignature = errors.New("missing Stripe-Signature header")
	ErrMalformedHeader  = errors.New("malformed Stripe-Signature header")
	ErrNoValidSignature = errors.New("no valid signature for any configured secret")
	ErrOutsideTolerance = errors.New("signature timestamp outside tolerance")
)

// Verifier checks Stripe-Signature headers against every configured secret
// (several during a rotation) and refuses timestamps too far in the past or
// in the future (stripe-go only checks the past).
type Verifier struct {
	secrets   []string
	tolerance time.Duration
	now       func() time.Time
}

// NewVerifier returns a Verifier. now may be nil.
func NewVerifier(secrets []string, tolerance time.Duration, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{secrets: secrets, tolerance: tolerance, now: now}
}

// Verify checks header against payload. The signature is checked before the
// timestamp so that only a holder of the secret learns about the clock.
func (v *Verifier) Verify(payload []byte, header string) error {
	if strings.TrimSpace(header) == "" {
		return ErrMissingSignature
	}
	ts, err := signedAt(header)
	if err != nil {
		return err
	}
	valid := false
	for _, secret := range v.secrets {
		err := webhook.ValidatePayloadIgnoringTolerance(payload, header, secret)
		if err == nil {
			valid = true
			break
		}
		if errors.Is(err, webhook.ErrInvalidHeader) {
			return ErrMalformedHeader
		}
	}
	if !valid {
		return ErrNoValidSignature
	}
	skew := v.now().Sub(ts)
	if skew > v.tolerance || skew < -v.tolerance {
		return ErrOutsideTolerance
	}
	return nil
}

// signedAt extracts the t= timestamp of a signature header.
func signedAt(header string) (time.Time, error) {
	var ts time.Time
	found := false
	for _, pair := range strings.Split(header, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return time.Time{}, ErrMalformedHeader
		}
		if k != "t" {
			continue
		}
		secs, err := strconv.ParseInt(val, 10, 64)
		if err != nil || found {
			return time.Time{}, ErrMalformedHeader
		}
		ts, found = time.Unix(secs, 0), true
	}
	if !found {
		return time.Time{}, ErrMalformedHeader
	}
	return ts, nil
}

// Sign returns a Stripe-Signature header for payload signed at t, as Stripe
// computes it. The poller and the `events sign` command replay with it.
func Sign(payload []byte, secret string, t time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: t}).Header
}
