package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLimitsDefaults(t *testing.T) {
	c, err := load(dev(nil))
	require.NoError(t, err)
	l := c.Limits
	assert.Equal(t, 16, l.DatabaseMaxConns)
	assert.Equal(t, 5*time.Second, l.DatabaseConnectTimeout)
	assert.Equal(t, 30*time.Second, l.DatabaseStatementTimeout)
	assert.Equal(t, 15*time.Second, l.DatabaseTCPUserTimeout)
	assert.Equal(t, 3*time.Second, l.DynamoTimeout)
	assert.Equal(t, 10*time.Second, l.IngestTimeout)
	assert.Equal(t, 5*time.Second, l.IngestBatchTimeout)
	assert.Equal(t, 1000, l.IngestQueueMax)
	assert.Equal(t, int64(64<<20), l.IngestQueueMaxBytes)
}

func TestLimitsInvalid(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"DATABASE_MAX_CONNS": "0"}, "DATABASE_MAX_CONNS"},
		{map[string]string{"DATABASE_MAX_CONNS": "many"}, "DATABASE_MAX_CONNS"},
		{map[string]string{"DATABASE_CONNECT_TIMEOUT": "0s"}, "DATABASE_CONNECT_TIMEOUT"},
		{map[string]string{"DATABASE_STATEMENT_TIMEOUT": "-1s"}, "DATABASE_STATEMENT_TIMEOUT"},
		{map[string]string{"DATABASE_TCP_USER_TIMEOUT": "soon"}, "DATABASE_TCP_USER_TIMEOUT"},
		{map[string]string{"DYNAMODB_TIMEOUT": "0"}, "DYNAMODB_TIMEOUT"},
		{map[string]string{"INGEST_TIMEOUT": "x"}, "INGEST_TIMEOUT"},
		{map[string]string{"INGEST_TIMEOUT": "4s"}, "INGEST_BATCH_TIMEOUT: below INGEST_TIMEOUT"},
		{map[string]string{"INGEST_QUEUE_MAX": "0"}, "INGEST_QUEUE_MAX"},
		{map[string]string{"INGEST_QUEUE_MAX_BYTES": "1024"}, "INGEST_QUEUE_MAX_BYTES"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			_, err := load(dev(tt.env))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	c, err := load(dev(map[string]string{"DATABASE_MAX_CONNS": "1", "INGEST_TIMEOUT": "3s", "INGEST_BATCH_TIMEOUT": "1s", "INGEST_QUEUE_MAX": "20"}))
	require.NoError(t, err)
	assert.Equal(t, 1, c.Limits.DatabaseMaxConns, "a pool of one is allowed (tests of starvation use it)")
	assert.Equal(t, 3*time.Second, c.Limits.IngestTimeout)
	assert.Equal(t, 20, c.Limits.IngestQueueMax)
}
