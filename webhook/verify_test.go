package webhook_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/webhook"
)

func TestVerify(t *testing.T) {
	const (
		oldSecret = "whsec_fake_test_old_0000"
		newSecret = "whsec_fake_test_new_1111"
	)
	now := time.Unix(1_700_000_000, 0)
	payload := []byte(`{"id":"evt_1","object":"event"}`)
	sign := func(secret string, at time.Time) string { return stripetest.Sign(payload, secret, at) }

	tests := []struct {
		name    string
		secrets []string
		header  string
		payload []byte
		want    error
	}{
		{name: "valid", secrets: []string{newSecret}, header: sign(newSecret, now)},
		{name: "first of two secrets", secrets: []string{oldSecret, newSecret}, header: sign(oldSecret, now)},
		{name: "second of two secrets", secrets: []string{oldSecret, newSecret}, header: sign(newSecret, now)},
		{name: "header with several signatures, one valid", secrets: []string{newSecret},
			header: sign(newSecret, now) + ",v1=" + "00ff", want: nil},
		{name: "edge of tolerance in the past", secrets: []string{newSecret}, header: sign(newSecret, now.Add(-300*time.Second))},
		{name: "edge of tolerance in the future", secrets: []string{newSecret}, header: sign(newSecret, now.Add(300*time.Second))},
		{name: "wrong secret", secrets: []string{newSecret}, header: sign("whsec_fake_other", now), want: webhook.ErrNoValidSignature},
		{name: "tampered payload", secrets: []string{newSecret}, header: sign(newSecret, now),
			payload: []byte(`{"id":"evt_2","object":"event"}`), want: webhook.ErrNoValidSignature},
		{name: "stale", secrets: []string{newSecret}, header: sign(newSecret, now.Add(-301*time.Second)), want: webhook.ErrOutsideTolerance},
		{name: "future", secrets: []string{newSecret}, header: sign(newSecret, now.Add(301*time.Second)), want: webhook.ErrOutsideTolerance},
		{name: "missing header", secrets: []string{newSecret}, header: "", want: webhook.ErrMissingSignature},
		{name: "blank header", secrets: []string{newSecret}, header: "   ", want: webhook.ErrMissingSignature},
		{name: "no timestamp", secrets: []string{newSecret}, header: "v1=abcdef", want: webhook.ErrMalformedHeader},
		{name: "non-numeric timestamp", secrets: []string{newSecret}, header: "t=yesterday,v1=abcdef", want: webhook.ErrMalformedHeader},
		{name: "two timestamps", secrets: []string{newSecret}, header: "t=1,t=2,v1=abcdef", want: webhook.ErrMalformedHeader},
		{name: "garbage", secrets: []string{newSecret}, header: "garbage", want: webhook.ErrMalformedHeader},
		{name: "no v1 signature", secrets: []string{newSecret}, header: "t=1700000000,v0=abcdef", want: webhook.ErrNoValidSignature},
		{name: "non-hex signature", secrets: []string{newSecret}, header: "t=1700000000,v1=zz", want: webhook.ErrNoValidSignature},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := webhook.NewVerifier(tc.secrets, 300*time.Second, func() time.Time { return now })
			body := payload
			if tc.payload != nil {
				body = tc.payload
			}
			err := v.Verify(body, tc.header)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func TestSignRoundTrip(t *testing.T) {
	payload := []byte(`{"hello":"world"}`)
	at := time.Now()
	header := webhook.Sign(payload, "whsec_fake_test_x", at)
	require.NoError(t, webhook.NewVerifier([]string{"whsec_fake_test_x"}, time.Minute, nil).Verify(payload, header))
}

func BenchmarkVerify(b *testing.B) {
	payload := make([]byte, 4096)
	for i := range payload {
		payload[i] = 'a'
	}
	now := time.Now()
	header := webhook.Sign(payload, "whsec_fake_bench_secret", now)
	v := webhook.NewVerifier([]string{"whsec_fake_bench_secret"}, 300*time.Second, func() time.Time { return now })
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(payload, header); err != nil {
			b.Fatal(err)
		}
	}
}
