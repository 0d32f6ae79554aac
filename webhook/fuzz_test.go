package webhook_test

import (
	"bytes"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v76/webhook"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/webhook"
)

// FuzzVerify: no header or payload makes Verify panic, and Verify accepts
// only what an independent oracle calls genuine.
func FuzzVerify(f *testing.F) {
	const secret = "whsec_fuzz_secret"
	now := time.Unix(1_700_000_000, 0)
	for _, name := range stripetest.FixtureNames() {
		payload := stripetest.Fixture(f, name)
		f.Add(payload, stripetest.Sign(payload, secret, now))
	}
	f.Add([]byte("{}"), "t=1700000000,v1=")
	f.Add([]byte("{}"), "t=,v1=00,v0=ff,t=1")
	f.Add([]byte(""), ",,,=,==")
	f.Add([]byte("x"), "t=99999999999999999999,v1=aa")
	v := webhook.NewVerifier([]string{"whsec_other", secret}, 300*time.Second, func() time.Time { return now })
	f.Fuzz(func(t *testing.T, payload []byte, header string) {
		if err := v.Verify(payload, header); err == nil && !genuine(payload, header, []string{"whsec_other", secret}, now) {
			t.Fatalf("accepted a forged or stale signature: %q", header)
		}
	})
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
