package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// The version-drift alert sees a new version's first delivery through the
// per-source count: its delivery sources' series exist at 0 from the start.
func TestUnexpectedVersionCountBySourceStartsAtZero(t *testing.T) {
	m := metrics.New()
	const name = "stripe_payments_events_unexpected_api_version_deliveries_total"
	assert.Equal(t, 2, count(t, m.Registry, name), "webhook and eventbridge, at 0")
	m.Delivered(stripeevent.SourceWebhook, "2099-01-01", false)
	m.Delivered(stripeevent.SourceWebhook, "2023-10-16", true)
	assert.Equal(t, 2, count(t, m.Registry, name))
	assert.Equal(t, 1, count(t, m.Registry, "stripe_payments_events_unexpected_api_version_total"))
}

// count is how many series the family name has in g.
func count(t *testing.T, g prometheus.Gatherer, name string) int {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}
