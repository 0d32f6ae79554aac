package opsdata

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// A test clock's day is listed with the real runs, marked with its clock,
// and never counted in the run metric the BillingRunFailed alert reads: a
// failing test clock is no reason to page anyone.
func TestClockRunsAreListedMarkedAndNotCounted(t *testing.T) {
	pool := testenv.Postgres(t)
	reg := prometheus.NewRegistry()
	r := NewRuns(pool, reg)
	ctx := context.Background()
	day := time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)
	started := time.Now().Add(-time.Second)

	require.NoError(t, r.Record(ctx, "collect", day, started, &billing.Report{Entries: 2, Succeeded: 2}, nil))
	require.NoError(t, r.RecordClockRun(ctx, "clock_abc", "collect", day, started.Add(time.Millisecond), nil, errors.New("the fake Stripe went away")))

	runs, err := r.Last(ctx, 10)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	assert.Equal(t, "clock_abc", runs[0].TestClock, "newest first: the clock's")
	assert.True(t, runs[0].Failed())
	assert.Empty(t, runs[1].TestClock, "a real run carries no clock")

	assert.Equal(t, 1.0, counted(t, r, "collect", "ok"))
	assert.Zero(t, counted(t, r, "collect", "failed"), "the clock's failed day is not a failed run")
}

func counted(t *testing.T, r *Runs, job, result string) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, r.count.WithLabelValues(job, result).Write(&m))
	return m.GetCounter().GetValue()
}
