// Package webhook is the Stripe webhook endpoint: body limit, signature
// check, event decoding, hand-off to the one event handler.
package webhook

import (
	"crypto/sha256"
	"encoding/hex"
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
	ts, err := CheckHeader(header)
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

// CheckHeader parses a Stripe-Signature header ("t=1495999758,v1=<hex>,...")
// without the payload and returns its timestamp. It refuses a header that
// no payload could verify against, so that the endpoint answers it before
// reading the body: ErrMissingSignature when blank, ErrMalformedHeader when
// it is not comma-separated key=value pairs with exactly one integer t=,
// ErrNoValidSignature when no v1= is a hex HMAC-SHA256. The pairs are read
// as stripe-go reads them, so that a header passing here is one stripe-go
// parses too.
func CheckHeader(header string) (time.Time, error) {
	if strings.TrimSpace(header) == "" {
		return time.Time{}, ErrMissingSignature
	}
	var ts time.Time
	found, signed := false, false
	for _, pair := range strings.Split(header, ",") {
		kv := strings.Split(strings.TrimSpace(pair), "=")
		if len(kv) != 2 {
			return time.Time{}, ErrMalformedHeader
		}
		switch kv[0] {
		case "t":
			secs, err := strconv.ParseInt(kv[1], 10, 64)
			if err != nil || found {
				return time.Time{}, ErrMalformedHeader
			}
			ts, found = time.Unix(secs, 0), true
		case "v1":
			if sig, err := hex.DecodeString(kv[1]); err == nil && len(sig) == sha256.Size {
				signed = true
			}
		}
	}
	if !found {
		return time.Time{}, ErrMalformedHeader
	}
	if !signed {
		return time.Time{}, ErrNoValidSignature
	}
	return ts, nil
}

// Sign returns a Stripe-Signature header for payload signed at t, as Stripe
// computes it. The poller and the `events sign` command replay with it.
func Sign(payload []byte, secret string, t time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: t}).Header
}
