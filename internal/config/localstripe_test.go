package config_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/design.md §3 "The embedded default for Stripe": in development mode
// STRIPE_API_BASE defaults to the local Stripe (LOCAL_STRIPE_ADDR), never
// outside it; an explicit STRIPE_API_BASE always wins.
func TestStripeAPIBaseDefaultsToTheLocalStripeInDevelopment(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"development", dev(nil), "http://127.0.0.1:8082"},
		{"development, LOCAL_STRIPE_ADDR", dev(map[string]string{"LOCAL_STRIPE_ADDR": "127.0.0.1:9999"}), "http://127.0.0.1:9999"},
		{"development, a real test key's base", dev(map[string]string{"STRIPE_API_BASE": "https://api.stripe.com/"}), "https://api.stripe.com"},
		{"production", production(), "https://api.stripe.com"},
		{"production ignores LOCAL_STRIPE_ADDR", func() map[string]string {
			e := production()
			e["LOCAL_STRIPE_ADDR"] = "127.0.0.1:9999"
			return e
		}(), "https://api.stripe.com"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.env)
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.StripeAPIBase)
		})
	}
}

// The logged configuration shows durations as Go durations: nested
// settings (billing, outbox, limits) printed nanoseconds
// (2592000000000000) before.
func TestLoggedConfigDurationsAreReadable(t *testing.T) {
	c, err := load(dev(nil))
	require.NoError(t, err)
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", c)
	var doc struct {
		Config map[string]any `json:"config"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc))
	var walk func(path string, v any)
	durations := 0
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(path+"."+k, e)
			}
		case float64:
			assert.Less(t, x, 1e9, "%s=%v looks like nanoseconds", path, x)
		case string:
			if _, err := time.ParseDuration(x); err == nil {
				durations++
			}
		}
	}
	walk("config", doc.Config)
	assert.Greater(t, durations, 10, "durations are logged as Go durations: %s", buf.String())
}
