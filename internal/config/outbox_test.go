package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOutboxDefaults(t *testing.T) {
	c, err := load(dev(nil))
	require.NoError(t, err)
	o := c.Outbox
	assert.Equal(t, 500, o.MaxAttempts)
	assert.Equal(t, 72*time.Hour, o.MaxAge)
	assert.Equal(t, 30*time.Second, o.Lease)
	assert.Equal(t, 720*time.Hour, o.Retention)
	assert.Equal(t, 2160*time.Hour, o.LedgerRetention)
	assert.Equal(t, time.Hour, o.PruneEvery)
	assert.Greater(t, o.LedgerRetention, c.EventTTL+30*24*time.Hour)
}

func TestOutboxSettings(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{name: "limits off", env: map[string]string{"OUTBOX_MAX_ATTEMPTS": "0", "OUTBOX_MAX_AGE": "0", "PRUNE_EVERY": "0"}},
		{name: "ledger retention just above the bound", env: map[string]string{"EVENT_TTL": "240h", "LEDGER_RETENTION": "961h"}},
		{name: "ledger retention equal to EVENT_TTL + 30 days", env: map[string]string{"EVENT_TTL": "240h", "LEDGER_RETENTION": "960h"}, wantErr: "LEDGER_RETENTION"},
		{name: "ledger retention shorter than the default bound", env: map[string]string{"LEDGER_RETENTION": "1000h"}, wantErr: "LEDGER_RETENTION"},
		{name: "long EVENT_TTL needs a longer ledger", env: map[string]string{"EVENT_TTL": "2160h"}, wantErr: "LEDGER_RETENTION"},
		{name: "outbox retention within the billing lookback", env: map[string]string{"BILLING_LOOKBACK_DAYS": "10", "OUTBOX_RETENTION": "240h"}, wantErr: "OUTBOX_RETENTION"},
		{name: "negative attempts", env: map[string]string{"OUTBOX_MAX_ATTEMPTS": "-1"}, wantErr: "OUTBOX_MAX_ATTEMPTS"},
		{name: "attempts not a number", env: map[string]string{"OUTBOX_MAX_ATTEMPTS": "many"}, wantErr: "OUTBOX_MAX_ATTEMPTS"},
		{name: "bad age", env: map[string]string{"OUTBOX_MAX_AGE": "3 days"}, wantErr: "OUTBOX_MAX_AGE"},
		{name: "lease too short for a 10 s delivery", env: map[string]string{"OUTBOX_LEASE": "10s"}, wantErr: "OUTBOX_LEASE"},
		{name: "zero lease", env: map[string]string{"OUTBOX_LEASE": "0"}, wantErr: "OUTBOX_LEASE"},
		{name: "zero retention", env: map[string]string{"OUTBOX_RETENTION": "0"}, wantErr: "OUTBOX_RETENTION"},
		{name: "prune too often", env: map[string]string{"PRUNE_EVERY": "1s"}, wantErr: "PRUNE_EVERY"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(dev(tc.env))
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
