package webhook_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v76/webhook"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/webhook"
)

// FuzzVerify checks Verify both ways on fuzzed input:
//   - no header or payload makes it panic, and it accepts only what an
//     independent oracle calls genuine (no forgery, no stale signature);
//   - every genuinely signed payload is accepted: any payload, signed as
//     Stripe signs it with either secret of a rotation, at any time within
//     the tolerance on either side of now, in each header shape Stripe
//     sends (one v1; several v1 while Stripe rolls its secret, the valid one
//     not first; a v0 beside them) — and refused as outside the tolerance
//     when signed further away.
func FuzzVerify(f *testing.F) {
	const secret = "whsec_fake_fuzz_secret"
	secrets := []string{"whsec_fake_other", secret}
	now := time.Unix(1_700_000_000, 0)
	for i, name := range stripetest.FixtureNames() {
		payload := stripetest.Fixture(f, name)
		f.Add(payload, stripetest.Sign(payload, secret, now), int64(i*37-150), uint8(i))
	}
	f.Add([]byte("{}"), "t=1700000000,v1=", int64(300), uint8(0))
	f.Add([]byte("{}"), "t=,v1=00,v0=ff,t=1", int64(-300), uint8(1))
	f.Add([]byte(""), ",,,=,==", int64(0), uint8(2))
	f.Add([]byte("x"), "t=99999999999999999999,v1=aa", int64(-1<<63), uint8(255))
	v := webhook.NewVerifier(secrets, 300*time.Second, func() time.Time { return now })
	f.Fuzz(func(t *testing.T, payload []byte, header string, offset int64, pick uint8) {
		if err := v.Verify(payload, header); err == nil && !genuine(payload, header, secrets, now) {
			t.Fatalf("accepted a forged or stale signature: %q", header)
		}

		// A genuine signature of this payload, made within the tolerance.
		within := time.Duration(offset%301) * time.Second // -300 s .. +300 s
		signed := genuineHeader(payload, secrets[pick%2], now.Add(within), pick/2%3)
		if !genuine(payload, signed, secrets, now) {
			t.Fatalf("the oracle disagrees with the signer on %q", signed)
		}
		if err := v.Verify(payload, signed); err != nil {
			t.Fatalf("refused a genuinely signed payload (signed %s from now, header %q): %v", within, signed, err)
		}
		// The same, signed outside the tolerance (past or future).
		beyond := time.Duration(301+uint64(offset)%1_000_000) * time.Second
		if offset < 0 {
			beyond = -beyond
		}
		stale := genuineHeader(payload, secrets[pick%2], now.Add(beyond), pick/2%3)
		if err := v.Verify(payload, stale); !errors.Is(err, webhook.ErrOutsideTolerance) {
			t.Fatalf("a signature made %s from now: want ErrOutsideTolerance, got %v", beyond, err)
		}
	})
}

// genuineHeader is a Stripe-Signature header as Stripe sends it, for payload
// signed with secret at ts, in one of three shapes.
func genuineHeader(payload []byte, secret string, ts time.Time, shape uint8) string {
	sig := hex.EncodeToString(stripewebhook.ComputeSignature(ts, payload, secret))
	t := strconv.FormatInt(ts.Unix(), 10)
	switch shape {
	case 1: // Stripe rolling its endpoint secret: an unknown secret's v1 first
		other := hex.EncodeToString(stripewebhook.ComputeSignature(ts, payload, "whsec_fake_unknown_to_us"))
		return "t=" + t + ",v1=" + other + ",v1=" + sig
	case 2: // a test-mode v0 signature beside the v1
		return "t=" + t + ",v1=" + sig + ",v0=" + strings.Repeat("ab", 32)
	default:
		return "t=" + t + ",v1=" + sig
	}
}

// genuine is the oracle: one t= within 300 s of now and a v1= that is the
// HMAC of "t.payload" under one of the secrets.
func genuine(payload []byte, header string, secrets []string, now time.Time) bool {
	var ts []int64
	var sigs [][]byte
	for _, pair := range strings.Split(header, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(pair), "=")
		switch k {
		case "t":
			if n, err := strconv.ParseInt(val, 10, 64); err == nil {
				ts = append(ts, n)
			}
		case "v1":
			if b, err := hex.DecodeString(val); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	if len(ts) != 1 || now.Sub(time.Unix(ts[0], 0)).Abs() > 300*time.Second {
		return false
	}
	for _, secret := range secrets {
		want := stripewebhook.ComputeSignature(time.Unix(ts[0], 0), payload, secret)
		for _, s := range sigs {
			if bytes.Equal(s, want) {
				return true
			}
		}
	}
	return false
}
