package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/metrics"
)

// gauges gathers a gauge family as "kind|state" -> value.
func gauges(t *testing.T, m *metrics.Metrics, name string) (map[string]float64, error) {
	t.Helper()
	families, err := m.Registry.Gather()
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			key := ""
			for _, l := range mt.GetLabel() {
				if key != "" {
					key += "|"
				}
				key += l.GetValue()
			}
			out[key] = mt.GetGauge().GetValue()
		}
	}
	return out, err
}

// Every kind and state is exported (0 when none), the counts are read at
// most every 30 s, and a failed read serves the last counts, never zeros
// and never a failed scrape.
func TestIncidentGauges(t *testing.T) {
	m := metrics.New()
	reads := 0
	var fail error
	m.WatchIncidents(func(context.Context) ([]metrics.IncidentCount, error) {
		reads++
		if fail != nil {
			return nil, fail
		}
		return []metrics.IncidentCount{
			{Kind: "event", State: "open", Incidents: 2, Occurrences: 51},
			{Kind: "billing", State: "acknowledged", Incidents: 1, Occurrences: 3},
		}, nil
	})
	got, err := gauges(t, m, "stripe_payments_incidents")
	require.NoError(t, err)
	assert.Len(t, got, 9, "3 kinds x 3 states")
	assert.Equal(t, 2.0, got["event|open"])
	assert.Equal(t, 1.0, got["billing|acknowledged"])
	assert.Equal(t, 0.0, got["delivery|open"])
	occ, err := gauges(t, m, "stripe_payments_incident_occurrences")
	require.NoError(t, err)
	assert.Equal(t, 51.0, occ["event|open"])
	assert.Equal(t, 1, reads, "one read for both families")

	fail = errors.New("postgres down")
	_, err = gauges(t, m, "stripe_payments_incidents")
	require.NoError(t, err, "within 30 s the last counts are served")
	assert.Equal(t, 1, reads)

	// A read that fails never fails the scrape (the instance would look
	// down): before any success the families are absent.
	fresh := metrics.New()
	fresh.WatchIncidents(func(context.Context) ([]metrics.IncidentCount, error) { return nil, errors.New("postgres down") })
	none, err := gauges(t, fresh, "stripe_payments_incidents")
	require.NoError(t, err)
	assert.Empty(t, none)
	handled, err := fresh.Registry.Gather()
	require.NoError(t, err)
	assert.NotEmpty(t, handled, "the other metrics are still served")
}

// Reads that keep failing: each is counted, the last successful read's
// time is exported, and counts older than 5 min are no longer served
// (absent, not yesterday's numbers as now's); a read that succeeds again
// brings them back.
func TestIncidentCountsStopWhenStale(t *testing.T) {
	m := metrics.New()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	var fail error
	m.WatchIncidentsAt(func(context.Context) ([]metrics.IncidentCount, error) {
		if fail != nil {
			return nil, fail
		}
		return []metrics.IncidentCount{{Kind: "event", State: "open", Incidents: 2, Occurrences: 51}}, nil
	}, func() time.Time { return now })
	scalar := func(name string) (float64, bool) {
		families, err := m.Registry.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() == name {
				mt := f.GetMetric()[0]
				if mt.GetCounter() != nil {
					return mt.GetCounter().GetValue(), true
				}
				return mt.GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	got, err := gauges(t, m, "stripe_payments_incidents")
	require.NoError(t, err)
	assert.Equal(t, 2.0, got["event|open"])
	last, ok := scalar("stripe_payments_incidents_last_read_timestamp_seconds")
	require.True(t, ok)
	assert.Equal(t, float64(now.Unix()), last)

	fail = errors.New("postgres down")
	read := now
	for _, tt := range []struct {
		after  time.Duration
		served bool
	}{{time.Minute, true}, {4 * time.Minute, true}, {6 * time.Minute, false}} {
		now = read.Add(tt.after)
		got, err := gauges(t, m, "stripe_payments_incidents")
		require.NoError(t, err)
		if tt.served {
			assert.Equal(t, 2.0, got["event|open"], tt.after)
		} else {
			assert.Empty(t, got, "counts %s old are not served", tt.after)
		}
	}
	failed, ok := scalar("stripe_payments_incident_reads_failed_total")
	require.True(t, ok)
	assert.Equal(t, 3.0, failed)
	last, _ = scalar("stripe_payments_incidents_last_read_timestamp_seconds")
	assert.Equal(t, float64(read.Unix()), last, "the last successful read")

	fail = nil
	now = now.Add(time.Minute)
	got, err = gauges(t, m, "stripe_payments_incidents")
	require.NoError(t, err)
	assert.Equal(t, 2.0, got["event|open"])
}
