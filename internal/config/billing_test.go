package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBillingDefaults(t *testing.T) {
	c, err := load(dev(nil))
	require.NoError(t, err)
	b := c.Billing
	assert.Equal(t, 8, b.Shards)
	assert.Equal(t, 2, b.WorkersPerShard)
	assert.Equal(t, 7, b.ReminderDays)
	assert.Equal(t, []int{1, 3, 5, 7}, b.RetryDays)
	assert.Equal(t, 30, b.StaleDays)
	assert.Equal(t, 4392*time.Hour, b.ReceiptTTL)
	assert.Equal(t, 3, b.LookbackDays)
	assert.Equal(t, 60*time.Second, b.LockLease)
	assert.Equal(t, time.Second, b.LockHeartbeat)
	assert.Equal(t, time.Duration(0), b.Every)
	assert.Equal(t, 20.0, b.StripeRateLimit)
	assert.Equal(t, 1, b.StripeExpectedReplicas)
}

func TestBillingInvalid(t *testing.T) {
	tests := map[string]string{
		"BILLING_SHARDS":           "0",
		"BILLING_WORKERS":          "x",
		"BILLING_REMINDER_DAYS":    "-1",
		"BILLING_RETRY_DAYS":       "3,1",
		"BILLING_STALE_DAYS":       "0",
		"BILLING_RECEIPT_TTL":      "forever",
		"BILLING_LOCK_HEARTBEAT":   "30s",
		"BILLING_EVERY":            "-1h",
		"STRIPE_RATE_LIMIT":        "0",
		"STRIPE_EXPECTED_REPLICAS": "0",
	}
	for k, v := range tests {
		t.Run(k, func(t *testing.T) {
			_, err := load(dev(map[string]string{k: v}))
			require.Error(t, err)
			assert.Contains(t, err.Error(), k)
		})
	}
	_, err := load(dev(map[string]string{"BILLING_RETRY_DAYS": "1,3,5,30"}))
	assert.ErrorContains(t, err, "BILLING_RETRY_DAYS", "retries stop before the stale threshold")
}
