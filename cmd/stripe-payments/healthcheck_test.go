package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHealthcheck: the image's HEALTHCHECK asks the admin listener
// (ADMIN_LISTEN_ADDR) for /readyz, or /healthz with --live, and exits 0 only
// on a 200, saying why in one line either way.
func TestHealthcheck(t *testing.T) {
	// The admin listener: /readyz answers what ready says, /healthz 200;
	// /slow never answers within the check's timeout.
	ready := true
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			if !ready {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"dynamodb":"ok","postgres":"unavailable"}` + "\n"))
				return
			}
			_, _ = w.Write([]byte(`{"dynamodb":"ok","postgres":"ok"}`))
		case "/healthz":
			_, _ = w.Write([]byte("ok"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer admin.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer slow.Close()
	host := strings.TrimPrefix(admin.URL, "http://")
	_, port, _ := net.SplitHostPort(host)
	closed := freeAddr(t)

	tests := []struct {
		name    string
		env     string // ADMIN_LISTEN_ADDR; "" unset
		args    []string
		notOK   bool // 503 from /readyz
		wantErr string
		wantOut string
	}{
		{name: "ready", env: host, wantOut: "ok: GET http://" + host + "/readyz: 200"},
		{name: "not ready names the failed check", env: host, notOK: true,
			wantErr: `unhealthy: GET http://` + host + `/readyz: 503 {"dynamodb":"ok","postgres":"unavailable"}`},
		{name: "live asks /healthz, which answers while not ready", env: host, args: []string{"--live"}, notOK: true,
			wantOut: "ok: GET http://" + host + "/healthz: 200"},
		{name: "all interfaces are checked on loopback", env: "0.0.0.0:" + port, wantOut: "ok: GET http://127.0.0.1:" + port + "/readyz: 200"},
		{name: "no host is checked on loopback", env: ":" + port, wantOut: "ok: GET http://127.0.0.1:" + port + "/readyz: 200"},
		{name: "IPv6 any is checked on loopback", env: "[::]:" + port, wantOut: "ok: GET http://127.0.0.1:" + port + "/readyz: 200"},
		{name: "--addr wins over the environment", env: closed, args: []string{"--addr", host}, wantOut: "ok: GET http://" + host + "/readyz: 200"},
		{name: "nothing listening", env: closed, wantErr: "unhealthy: GET http://" + closed + "/readyz: "},
		{name: "no answer within the timeout", env: strings.TrimPrefix(slow.URL, "http://"), args: []string{"--timeout", "200ms"},
			wantErr: "no answer within 200ms"},
		{name: "a bad address", env: "not-an-address", wantErr: "ADMIN_LISTEN_ADDR"},
		{name: "a bad timeout", env: host, args: []string{"--timeout", "0s"}, wantErr: "--timeout"},
		{name: "an extra argument", env: host, args: []string{"readyz"}, wantErr: "takes no arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ready = !tc.notOK
			getenv := func(k string) string {
				if k == "ADMIN_LISTEN_ADDR" {
					return tc.env
				}
				return ""
			}
			var stdout, stderr bytes.Buffer
			start := time.Now()
			err := healthcheck(context.Background(), tc.args, getenv, &stdout, &stderr)
			assert.Less(t, time.Since(start), 6*time.Second, "a check is short")
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.NotContains(t, err.Error(), "\n", "one line")
				assert.Empty(t, stdout.String())
				return
			}
			require.NoError(t, err, stderr.String())
			assert.Equal(t, tc.wantOut+"\n", stdout.String(), "one line")
		})
	}
}

// The default address is ADMIN_LISTEN_ADDR's default, and -h prints the
// usage without checking anything.
func TestHealthcheckDefaultsAndHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.NoError(t, healthcheck(context.Background(), []string{"-h"}, func(string) string { return "" }, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "usage: stripe-payments healthcheck")
	assert.Contains(t, stdout.String(), "127.0.0.1:8081")
	assert.Contains(t, stdout.String(), "--live")

	stdout.Reset()
	require.NoError(t, run(context.Background(), []string{"help"}, strings.NewReader(""), &stdout, &stderr))
	assert.Contains(t, stdout.String(), "healthcheck")
}
