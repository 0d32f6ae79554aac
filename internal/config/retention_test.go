package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The retention and hardening settings (docs/retention.md): defaults and
// bounds.
func TestHardeningDefaults(t *testing.T) {
	c, err := load(dev(nil))
	require.NoError(t, err)
	assert.Equal(t, 2160*time.Hour, c.Retention.DeadLetters)
	assert.Equal(t, 2160*time.Hour, c.Retention.Ops)
	assert.Equal(t, 100, c.Billing.TestClocksMax)
	assert.Equal(t, 30*time.Second, c.Billing.TestClockSettleWait)
	assert.EqualValues(t, 64<<20, c.IngestRecords.BacklogBytes)
	assert.Equal(t, 5, c.IngestRecords.QuarantineAfter)
}

func TestHardeningSettings(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{name: "short retentions", env: map[string]string{"DEAD_LETTER_RETENTION": "24h", "OPS_RETENTION": "48h"}},
		{name: "dead letters kept less than a day", env: map[string]string{"DEAD_LETTER_RETENTION": "23h"}, wantErr: "DEAD_LETTER_RETENTION"},
		{name: "ops rows kept less than the chart", env: map[string]string{"OPS_RETENTION": "47h"}, wantErr: "OPS_RETENTION"},
		{name: "retention not a duration", env: map[string]string{"OPS_RETENTION": "90 days"}, wantErr: "OPS_RETENTION"},
		{name: "one test clock", env: map[string]string{"TEST_CLOCKS_MAX": "1"}},
		{name: "no test clock", env: map[string]string{"TEST_CLOCKS_MAX": "0"}, wantErr: "TEST_CLOCKS_MAX"},
		{name: "test clocks do not wait for bank debits", env: map[string]string{"TEST_CLOCK_SETTLE_WAIT": "0"}},
		{name: "test clocks wait 10 minutes for a bank debit", env: map[string]string{"TEST_CLOCK_SETTLE_WAIT": "10m"}},
		{name: "test clocks wait longer than 10 minutes", env: map[string]string{"TEST_CLOCK_SETTLE_WAIT": "11m"}, wantErr: "TEST_CLOCK_SETTLE_WAIT"},
		{name: "test clock wait not a duration", env: map[string]string{"TEST_CLOCK_SETTLE_WAIT": "30"}, wantErr: "TEST_CLOCK_SETTLE_WAIT"},
		{name: "test clock wait negative", env: map[string]string{"TEST_CLOCK_SETTLE_WAIT": "-1s"}, wantErr: "TEST_CLOCK_SETTLE_WAIT"},
		{name: "backlog of 1 MiB", env: map[string]string{"INGEST_RECORD_BACKLOG_BYTES": "1048576"}},
		{name: "backlog under 1 MiB", env: map[string]string{"INGEST_RECORD_BACKLOG_BYTES": "1000"}, wantErr: "INGEST_RECORD_BACKLOG_BYTES"},
		{name: "quarantine at once", env: map[string]string{"INGEST_RECORD_QUARANTINE_AFTER": "1"}},
		{name: "quarantine never", env: map[string]string{"INGEST_RECORD_QUARANTINE_AFTER": "0"}, wantErr: "INGEST_RECORD_QUARANTINE_AFTER"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(dev(tc.env))
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}
