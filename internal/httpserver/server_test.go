package httpserver_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/httpserver"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// open starts a real server on a loopback port with a few routes like the
// service's: a template with a parameter, and handlers that panic.
func open(t *testing.T) (*httpserver.Server, *testenv.Logs) {
	t.Helper()
	logs := &testenv.Logs{}
	srv := httpserver.New(slog.New(slog.NewJSONHandler(logs, nil)), metrics.New(), nil)
	srv.Echo.GET("/things/:id", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"id": c.Param("id")})
	})
	srv.Echo.POST("/panic", func(echo.Context) error { panic("boom: injected") })
	srv.Echo.GET("/panic/:id", func(echo.Context) error {
		var m map[string]int
		m["nil map write"] = 1 // a runtime error panic
		return nil
	})
	require.NoError(t, srv.Open("127.0.0.1:0"))
	t.Cleanup(func() { _ = srv.Close(t.Context()) })
	return srv, logs
}

func do(t *testing.T, client *http.Client, method, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

func scrape(t *testing.T, client *http.Client, base string) string {
	t.Helper()
	status, body := do(t, client, http.MethodGet, base+"/metrics")
	require.Equal(t, http.StatusOK, status)
	return string(body)
}

// TestPanicAnswers500AndServerContinues: a panicking handler answers a 500
// JSON error, is logged with its stack and counted, and the server keeps
// serving, the same route included.
func TestPanicAnswers500AndServerContinues(t *testing.T) {
	srv, logs := open(t)
	client := &http.Client{Timeout: 10 * time.Second}
	for i, path := range []string{"/panic", "/panic/evt_1", "/panic/evt_2"} {
		method := http.MethodGet
		if path == "/panic" {
			method = http.MethodPost
		}
		status, body := do(t, client, method, srv.URL()+path)
		assert.Equal(t, http.StatusInternalServerError, status, path)
		var e struct {
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.Unmarshal(body, &e), string(body))
		assert.Equal(t, "internal", e.Error.Code)
		assert.NotContains(t, string(body), "boom", "the panic value stays in the logs")
		status, _ = do(t, client, http.MethodGet, srv.URL()+"/things/x"+fmt.Sprint(i))
		assert.Equal(t, http.StatusOK, status, "the server continues after a panic")
	}
	text := scrape(t, client, srv.URL())
	assert.Contains(t, text, `stripe_payments_http_panics_total{route="/panic"} 1`)
	assert.Contains(t, text, `stripe_payments_http_panics_total{route="/panic/:id"} 2`)
	assert.Contains(t, text, `stripe_payments_http_requests_total{code="500",method="POST",route="/panic"} 1`)
	log := logs.String()
	assert.Contains(t, log, `"msg":"handler panicked"`)
	assert.Contains(t, log, "boom: injected")
	assert.Contains(t, log, "assignment to entry in nil map")
	assert.Contains(t, log, "server_test.go", "the stack is logged")
}

// TestMetricLabelsAreBounded: 20,000 requests with made-up methods (and
// made-up paths, and parameter values) leave /metrics under 100 KiB: the
// method label is one of a fixed set and the route label a template.
func TestMetricLabelsAreBounded(t *testing.T) {
	srv, _ := open(t)
	client := &http.Client{Timeout: 10 * time.Second}
	// The requests go through the server's handler (every middleware,
	// router and error handler) in process: the same labels as over TCP at
	// a fraction of the cost under -race.
	const n = 20000
	for i := 0; i < n; i++ {
		method := fmt.Sprintf("X%06d", i) // a valid token, never a real method
		path := "/things/" + fmt.Sprint(i)
		switch i % 4 {
		case 1:
			path = fmt.Sprintf("/no/such/path/%d", i)
		case 2:
			method = http.MethodGet
		case 3:
			method = http.MethodGet
			path = fmt.Sprintf("/made-up-%d", i)
		}
		srv.Echo.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, path, nil))
	}

	text := scrape(t, client, srv.URL())
	t.Logf("/metrics after %d requests: %d bytes", n, len(text))
	assert.Less(t, len(text), 100<<10, "/metrics must stay under 100 KiB")
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "stripe_payments_http_") {
			continue
		}
		assert.NotContains(t, line, "X0", "a made-up method became a label: %s", line)
		assert.NotContains(t, line, "/no/such", "a raw path became a label: %s", line)
		assert.NotContains(t, line, "/made-up", "a raw path became a label: %s", line)
		assert.NotRegexp(t, `/things/\d`, line, "a parameter value became a label")
	}
	assert.Contains(t, text, `method="OTHER"`)
	assert.Contains(t, text, `route="unmatched"`)
	assert.Contains(t, text, `stripe_payments_http_requests_total{code="200",method="GET",route="/things/:id"} 5000`)
}

func TestMethodLabel(t *testing.T) {
	for method, want := range map[string]string{
		"GET": "GET", "HEAD": "HEAD", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH", "DELETE": "DELETE",
		"OPTIONS": "OPTIONS", "CONNECT": "CONNECT", "TRACE": "TRACE",
		"get": "OTHER", "PROPFIND": "OTHER", "X123": "OTHER", "": "OTHER",
	} {
		assert.Equal(t, want, httpserver.MethodLabel(method), method)
	}
}
