package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RECONCILE_EVERY is off unless set, at least a minute; RECONCILE_WINDOW
// defaults to 90 days, at least a day.
func TestReconcileSettings(t *testing.T) {
	c, err := load(dev(nil))
	require.NoError(t, err)
	assert.Zero(t, c.ReconcileEvery, "off by default")
	assert.Equal(t, 90*24*time.Hour, c.ReconcileWindow)

	c, err = load(dev(map[string]string{"RECONCILE_EVERY": "24h", "RECONCILE_WINDOW": "720h"}))
	require.NoError(t, err)
	assert.Equal(t, 24*time.Hour, c.ReconcileEvery)
	assert.Equal(t, 720*time.Hour, c.ReconcileWindow)

	for _, tc := range []struct{ name, key, value string }{
		{"every not a duration", "RECONCILE_EVERY", "daily"},
		{"every too often", "RECONCILE_EVERY", "10s"},
		{"window not a duration", "RECONCILE_WINDOW", "90d"},
		{"window under a day", "RECONCILE_WINDOW", "1h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(dev(map[string]string{tc.key: tc.value}))
			assert.ErrorContains(t, err, tc.key)
		})
	}
}
