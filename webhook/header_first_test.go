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
// missing_signature without reading a byte of its body (issue 26 finding
// 10: it used to read up to 1 MiB first).
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
