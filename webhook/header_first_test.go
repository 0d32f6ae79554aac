package webhook_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/httpserver"
	"github.com/stripe-payments/stripe-payments/internal/ingest"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/webhook"
)

// countingBody counts the bytes read from a request body.
type countingBody struct {
	r    *strings.Reader
	read int
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *countingBody) Close() error { return nil }

type refuseAll struct{}

func (refuseAll) Ingest(context.Context, []byte, stripeevent.Source) (ingest.Result, error) {
	panic("an unsigned request reached the ingester")
}

// TestUnsignedRequestIsRefusedBeforeTheBodyIsRead: a request without a
// Stripe-Signature header (absent or blank) is answered 400
// missing_signature without reading a byte of its body: an unsigned sender
// must not make the server read up to 1 MiB for nothing.
func TestUnsignedRequestIsRefusedBeforeTheBodyIsRead(t *testing.T) {
	for _, header := range []string{"", "   "} {
		e := httpserver.New(slog.New(slog.DiscardHandler), metrics.New(), nil).Echo
		v := webhook.NewVerifier([]string{"whsec_fake_header_first"}, 300*time.Second, time.Now)
		webhook.NewEndpoint(v, refuseAll{}, 1<<20, nil).Register(e)
		body := &countingBody{r: strings.NewReader(strings.Repeat("x", 512<<10))}
		req := httptest.NewRequest(http.MethodPost, webhook.Path, body)
		if header != "" {
			req.Header.Set("Stripe-Signature", header)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
		require.Contains(t, rec.Body.String(), "missing")
		require.Zero(t, body.read, "body bytes read before the signature header was checked")
	}
}

// TestMalformedSignatureIsRefusedBeforeTheBodyIsRead: a Stripe-Signature
// header that cannot carry a valid signature whatever the body (not
// key=value pairs, no or several t=, a t= that is not a Unix time, no v1=
// that is an HMAC-SHA256 in hex) is answered 400 invalid_signature, with the
// same JSON error as a verification that fails, and not a byte of the body
// is read.
func TestMalformedSignatureIsRefusedBeforeTheBodyIsRead(t *testing.T) {
	const (
		malformed = `{"error":{"code":"invalid_signature","message":"malformed Stripe-Signature header"}}`
		noValid   = `{"error":{"code":"invalid_signature","message":"no valid signature for this endpoint"}}`
	)
	sig := strings.Repeat("ab", 32)
	for _, tc := range []struct{ name, header, want string }{
		{"garbage", "garbage", malformed},
		{"no t", "v1=" + sig, malformed},
		{"t not a number", "t=soon,v1=" + sig, malformed},
		{"two t", "t=1700000000,t=1700000001,v1=" + sig, malformed},
		{"pair without =", "t=1700000000,v1", malformed},
		{"v1 with extra =", "t=1700000000,v1=" + sig + "=", malformed},
		{"separator only", ",", malformed},
		{"empty t and v1", "t=,v1=", malformed},
		{"t with extra text", "t=1700000000x,v1=" + sig, malformed},
		{"no v1", "t=1700000000", noValid},
		{"only v0", "t=1700000000,v0=" + sig, noValid},
		{"v1 not hex", "t=1700000000,v1=zz" + sig[2:], noValid},
		{"v1 too short", "t=1700000000,v1=abcd", noValid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := httpserver.New(slog.New(slog.DiscardHandler), metrics.New(), nil).Echo
			v := webhook.NewVerifier([]string{"whsec_fake_header_first"}, 300*time.Second, time.Now)
			webhook.NewEndpoint(v, refuseAll{}, 1<<20, nil).Register(e)
			body := &countingBody{r: strings.NewReader(strings.Repeat("x", 512<<10))}
			req := httptest.NewRequest(http.MethodPost, webhook.Path, body)
			req.Header.Set("Stripe-Signature", tc.header)
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			require.JSONEq(t, tc.want, rec.Body.String())
			require.Zero(t, body.read, "body bytes read before the signature header was parsed")
		})
	}
}
