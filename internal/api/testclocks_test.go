package api_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/api"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/httpserver"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
)

// newClockAPI is newAPI with the test-clock options.
func newClockAPI(t *testing.T, livemode bool, wait time.Duration) (client, *billingtest.Env) {
	t.Helper()
	cfg := billingtest.TestConfig()
	cfg.Livemode = livemode
	e := billingtest.NewEnv(t, billingtest.Options{Config: cfg})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httpserver.New(log, metrics.New(), nil)
	api.Register(srv.Echo, token, api.Deps{Billing: e.Service, TestClocks: e.Clocks, Livemode: livemode, AdvanceWait: wait})
	ts := httptest.NewServer(srv.Echo)
	t.Cleanup(ts.Close)
	return client{t: t, base: ts.URL + api.Prefix}, e
}

func TestTestClockRoutes(t *testing.T) {
	t.Parallel()
	c, _ := newClockAPI(t, false, 0)

	bad := []struct {
		name string
		body any
		want string
	}{
		{"no frozen_time", map[string]any{"name": "x"}, "frozen_time: required"},
		{"not RFC 3339", map[string]any{"frozen_time": "2027-01-01"}, "frozen_time: an RFC 3339 time"},
		{"a number", map[string]any{"frozen_time": 1798761600}, "invalid JSON body"},
		{"unknown field", map[string]any{"frozen_time": "2027-01-01T00:00:00Z", "livemode": false}, "invalid JSON body"},
		{"name on two lines", map[string]any{"frozen_time": "2027-01-01T00:00:00Z", "name": "a\nb"}, "name:"},
		{"year 1900", map[string]any{"frozen_time": "1900-01-01T00:00:00Z"}, "frozen_time:"},
	}
	for _, tc := range bad {
		status, body := c.do(http.MethodPost, "/test_clocks", tc.body)
		assert.Equal(t, http.StatusBadRequest, status, tc.name)
		assert.Contains(t, body["error"].(map[string]any)["message"], tc.want, tc.name)
	}

	status, clock := c.do(http.MethodPost, "/test_clocks", map[string]any{"frozen_time": "2027-01-01T00:00:00Z", "name": "demo"})
	require.Equal(t, http.StatusCreated, status, clock)
	id := clock["id"].(string)
	assert.True(t, strings.HasPrefix(id, "clock_"), id)
	assert.Equal(t, "2027-01-01T00:00:00Z", clock["frozen_time"])
	assert.Equal(t, "ready", clock["status"])
	assert.Equal(t, "demo", clock["name"])
	assert.Equal(t, []any{}, clock["runs"])

	create := validCreate()
	create["payment_day"], create["test_clock"] = 10, id
	status, sub := c.do(http.MethodPost, "/accounts/acc-1/subscriptions", create)
	require.Equal(t, http.StatusCreated, status, sub)
	assert.Equal(t, id, sub["test_clock"])
	assert.Equal(t, "2027-01-10", sub["next_payment_date"])
	create["test_clock"] = "clock_nope"
	status, body := c.do(http.MethodPost, "/accounts/acc-1/subscriptions", create)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body["error"].(map[string]any)["message"], "no test clock clock_nope")

	for _, tc := range []struct {
		body any
		want int
	}{
		{map[string]any{"frozen_time": "2026-12-31T00:00:00Z"}, http.StatusBadRequest},
		{map[string]any{"frozen_time": "2027-01-01T00:00:00Z"}, http.StatusBadRequest},
		{map[string]any{"frozen_time": "2030-01-01T00:00:01Z"}, http.StatusBadRequest},
		{map[string]any{"frozen_time": "2027-02-01T00:00:00Z", "name": "x"}, http.StatusBadRequest},
		{map[string]any{}, http.StatusBadRequest},
	} {
		status, _ := c.do(http.MethodPost, "/test_clocks/"+id+"/advance", tc.body)
		assert.Equal(t, tc.want, status, tc.body)
	}
	status, clock = c.do(http.MethodPost, "/test_clocks/"+id+"/advance", map[string]any{"frozen_time": "2027-02-01T00:00:00Z"})
	// 200 when done within 10 s; on a loaded machine 202, then ready.
	require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, status, "%v", clock)
	require.Eventually(t, func() bool {
		_, clock = c.do(http.MethodGet, "/test_clocks/"+id, nil)
		return clock["status"] == "ready"
	}, 5*time.Minute, 100*time.Millisecond)
	assert.Equal(t, "2027-02-01T00:00:00Z", clock["frozen_time"])
	runs := clock["runs"].([]any)
	require.NotEmpty(t, runs)
	charged := 0.0
	for _, r := range runs {
		charged += r.(map[string]any)["charges_succeeded"].(float64)
	}
	assert.Equal(t, 1.0, charged, "Jan 10")

	status, list := c.do(http.MethodGet, "/test_clocks", nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, list["data"], 1)
	assert.Equal(t, id, list["data"].([]any)[0].(map[string]any)["id"])
	status, got := c.do(http.MethodGet, "/test_clocks/"+id, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, clock["runs"], got["runs"], "GET shows the runs the advance recorded")
	status, _ = c.do(http.MethodGet, "/test_clocks/clock_unknown", nil)
	assert.Equal(t, http.StatusNotFound, status)
	status, _ = c.do(http.MethodGet, "/test_clocks/"+strings.Repeat("x", 200), nil)
	assert.Equal(t, http.StatusBadRequest, status)

	status, body = c.do(http.MethodDelete, "/test_clocks/"+id, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, true, body["deleted"])
	status, _ = c.do(http.MethodGet, "/test_clocks/"+id, nil)
	assert.Equal(t, http.StatusNotFound, status)
	_, list = c.do(http.MethodGet, "/test_clocks", nil)
	assert.Empty(t, list["data"], "a deleted clock leaves the list")
	status, sub = c.do(http.MethodGet, "/accounts/acc-1/subscriptions/"+sub["subscription_id"].(string), nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "CANCELLED", sub["status"])
}

func TestTestClockAdvanceAnswers202WhenItTakesLonger(t *testing.T) {
	t.Parallel()
	c, _ := newClockAPI(t, false, time.Millisecond)
	_, clock := c.do(http.MethodPost, "/test_clocks", map[string]any{"frozen_time": "2027-01-01T00:00:00Z"})
	id := clock["id"].(string)
	create := validCreate()
	create["test_clock"] = id
	status, _ := c.do(http.MethodPost, "/accounts/acc-1/subscriptions", create)
	require.Equal(t, http.StatusCreated, status)

	status, clock = c.do(http.MethodPost, "/test_clocks/"+id+"/advance", map[string]any{"frozen_time": "2028-01-01T00:00:00Z"})
	require.Equal(t, http.StatusAccepted, status, clock)
	assert.Equal(t, "advancing", clock["status"])
	assert.Equal(t, "2028-01-01T00:00:00Z", clock["frozen_time"])
	status, body := c.do(http.MethodPost, "/test_clocks/"+id+"/advance", map[string]any{"frozen_time": "2028-02-01T00:00:00Z"})
	assert.Equal(t, http.StatusConflict, status, "one advance at a time")
	assert.Equal(t, "conflict", errCode(body))
	require.Eventually(t, func() bool {
		_, clock = c.do(http.MethodGet, "/test_clocks/"+id, nil)
		return clock["status"] == "ready"
	}, 10*time.Minute, 50*time.Millisecond)
	assert.Equal(t, "2028-01-01T00:00:00Z", clock["advanced_to"])
}

func TestTestClockRoutesAnswer403InLivemode(t *testing.T) {
	t.Parallel()
	c, e := newClockAPI(t, true, 0)
	create := validCreate()
	create["test_clock"] = "clock_1"
	for _, r := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/test_clocks", map[string]any{"frozen_time": "2027-01-01T00:00:00Z"}},
		{http.MethodPost, "/test_clocks", "not even JSON"},
		{http.MethodGet, "/test_clocks/clock_1", nil},
		{http.MethodGet, "/test_clocks", nil},
		{http.MethodGet, "/test_clocks/" + strings.Repeat("x", 200), nil},
		{http.MethodPost, "/test_clocks/clock_1/advance", map[string]any{"frozen_time": "2027-02-01T00:00:00Z"}},
		{http.MethodDelete, "/test_clocks/clock_1", nil},
		{http.MethodPost, "/accounts/acc-1/subscriptions", create},
	} {
		status, body := c.do(r.method, r.path, r.body)
		assert.Equal(t, http.StatusForbidden, status, r.method+" "+r.path)
		assert.Equal(t, "livemode", errCode(body), r.method+" "+r.path)
	}
	page, err := e.Service.ListSubscriptions(t.Context(), "acc-1", 10, "")
	require.NoError(t, err)
	assert.Empty(t, page.Items, "nothing created")
}
