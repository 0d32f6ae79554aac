package api_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/api"
	"github.com/stripe-payments/stripe-payments/internal/billing/testclock"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/httpserver"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
)

// TestTestClockLimitsAnswer409And400: one clock past
// TEST_CLOCKS_MAX is a 409 conflict naming the limit; an advance past the
// year-2100 ceiling is a 400 changing nothing.
func TestTestClockLimitsAnswer409And400(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{Clocks: testclock.Config{MaxClocks: 1}})
	srv := httpserver.New(slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(), nil)
	api.Register(srv.Echo, token, api.Deps{Billing: e.Service, TestClocks: e.Clocks})
	ts := httptest.NewServer(srv.Echo)
	t.Cleanup(ts.Close)
	c := client{t: t, base: ts.URL + api.Prefix}

	status, clock := c.do(http.MethodPost, "/test_clocks", map[string]any{"frozen_time": "2100-12-01T00:00:00Z"})
	require.Equal(t, http.StatusCreated, status, clock)
	status, body := c.do(http.MethodPost, "/test_clocks", map[string]any{"frozen_time": "2027-01-01T00:00:00Z"})
	assert.Equal(t, http.StatusConflict, status, body)
	assert.Contains(t, body["error"].(map[string]any)["message"], "TEST_CLOCKS_MAX")

	id := clock["id"].(string)
	status, body = c.do(http.MethodPost, "/test_clocks/"+id+"/advance", map[string]any{"frozen_time": "2101-06-01T00:00:00Z"})
	assert.Equal(t, http.StatusBadRequest, status, body)
	assert.Equal(t, "invalid_parameter", errCode(body))
	status, got := c.do(http.MethodGet, "/test_clocks/"+id, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "2100-12-01T00:00:00Z", got["frozen_time"], "the refused advance changed nothing")
}
