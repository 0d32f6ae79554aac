package httpserver_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/httpserver"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
)

// The public server has /healthz and nothing else of its own; the admin
// server has /healthz, /readyz and /metrics.
func TestPublicServerServesOnlyHealthz(t *testing.T) {
	m := metrics.New()
	public := httpserver.NewPublic(slog.New(slog.DiscardHandler), m)
	require.NoError(t, public.Open("127.0.0.1:0"))
	t.Cleanup(func() { _ = public.Close(t.Context()) })
	admin := httpserver.New(slog.New(slog.DiscardHandler), m, nil)
	require.NoError(t, admin.Open("127.0.0.1:0"))
	t.Cleanup(func() { _ = admin.Close(t.Context()) })
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 404, "/metrics": 404} {
		status, _ := do(t, http.DefaultClient, http.MethodGet, public.URL()+path)
		assert.Equal(t, want, status, "public "+path)
		status, _ = do(t, http.DefaultClient, http.MethodGet, admin.URL()+path)
		assert.Equal(t, http.StatusOK, status, "admin "+path)
	}
}

// RealIP is the connection's address unless the connection comes from a
// trusted proxy: then the right-most X-Forwarded-For entry that is not a
// trusted proxy.
func TestTrustProxies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		proxies []string
		remote  string
		xff     string
		want    string
	}{
		{"no proxy trusted: the header is ignored", nil, "127.0.0.1:5000", "203.0.113.1", "127.0.0.1"},
		{"no proxy trusted, private remote: still ignored", nil, "10.0.0.5:5000", "203.0.113.1", "10.0.0.5"},
		{"from a trusted proxy", []string{"10.0.0.0/8"}, "10.0.0.5:5000", "203.0.113.1", "203.0.113.1"},
		{"the client's own claim left of it is not believed", []string{"10.0.0.0/8"}, "10.0.0.5:5000", "198.51.100.9, 203.0.113.1", "203.0.113.1"},
		{"a chain of trusted proxies", []string{"10.0.0.0/8"}, "10.0.0.5:5000", "203.0.113.1, 10.1.1.1", "203.0.113.1"},
		{"from an untrusted address", []string{"10.0.0.0/8"}, "192.0.2.7:5000", "203.0.113.1", "192.0.2.7"},
		{"loopback is not trusted unless named", []string{"10.0.0.0/8"}, "127.0.0.1:5000", "203.0.113.1", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httpserver.NewPublic(slog.New(slog.DiscardHandler), metrics.New())
			var prefixes []netip.Prefix
			for _, p := range tc.proxies {
				prefixes = append(prefixes, netip.MustParsePrefix(p))
			}
			srv.TrustProxies(prefixes)
			var got string
			srv.Echo.GET("/ip", func(c echo.Context) error { got = c.RealIP(); return nil })
			req, err := http.NewRequest(http.MethodGet, "/ip", nil)
			require.NoError(t, err)
			req.RemoteAddr = tc.remote
			req.Header.Set("X-Forwarded-For", tc.xff)
			srv.Echo.ServeHTTP(httptest.NewRecorder(), req)
			assert.Equal(t, tc.want, got)
		})
	}
}
