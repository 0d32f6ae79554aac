package lock_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/safego"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// panicOnce panics on the first heartbeat (an UpdateItem) it carries, as a
// bug in the SDK or a middleware would; every other request goes through.
type panicOnce struct {
	mu     sync.Mutex
	panics bool
}

func (p *panicOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	first := !p.panics && strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem")
	if first {
		p.panics = true
	}
	p.mu.Unlock()
	if first {
		panic("injected panic in a heartbeat")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestAPanickingHeartbeatIsRecoveredAndTheLockKept: a panic in one
// heartbeat must not end the process (a lock is held while money moves) nor
// the heartbeat: it is logged with its stack, counted, and the next beats
// keep the lock.
func TestAPanickingHeartbeatIsRecoveredAndTheLockKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var logs testenv.Logs
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	panics := metrics.NewPanics(reg)
	tr := &panicOnce{}
	db := dynamodb.New(e.db.Options(), func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: tr} })
	c := lock.New(db, e.table, lock.Options{Owner: "holder", Lease: 30 * time.Second, Heartbeat: 20 * time.Millisecond,
		Log: log, Safe: safego.New(log, panics, 10*time.Millisecond)})
	key := "test:panicking-heartbeat"
	held, err := c.Acquire(context.Background(), key, true)
	require.NoError(t, err)
	defer func() { _ = held.Release(context.Background()) }()

	eventually(t, "the panic", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.panics
	})
	// The beats after the panic go on: the RVN moves twice more.
	for range 2 {
		seen := e.rvn(t, key)
		eventually(t, "a heartbeat after the panic", func() bool { return e.rvn(t, key) != seen })
	}
	assert.True(t, held.Valid())
	assert.NoError(t, held.Context().Err())
	assert.Equal(t, 1.0, testenv.PanicCount(t, reg, "lock_heartbeat"))
	assert.Contains(t, logs.String(), "injected panic in a heartbeat")
	assert.Contains(t, logs.String(), `"goroutine":"lock_heartbeat"`)
}
