package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// IncidentCount is one kind and state's incidents and their occurrences.
type IncidentCount struct {
	Kind, State string
	Incidents   int
	Occurrences int64
}

// IncidentCounts reads the current counts (incidents.Store.List, grouped).
type IncidentCounts func(ctx context.Context) ([]IncidentCount, error)

// incidentKinds and incidentStates are always exported (0 when none), so a
// panel or a rule sees a series before the first incident.
var (
	incidentKinds  = []string{"event", "delivery", "billing"}
	incidentStates = []string{"open", "acknowledged", "resolved"}
)

// WatchIncidents exports stripe_payments_incidents{kind,state} and
// stripe_payments_incident_occurrences{kind,state}, read on scrape at most
// every 30 s (the groups are computed from Postgres on each read).
func (m *Metrics) WatchIncidents(read IncidentCounts) {
	m.Registry.MustRegister(&incidentCollector{read: read, every: 30 * time.Second,
		incidents: prometheus.NewDesc("stripe_payments_incidents",
			"Incidents (failures grouped by cause, type and account), by kind and state.", []string{"kind", "state"}, nil),
		occurrences: prometheus.NewDesc("stripe_payments_incident_occurrences",
			"Occurrences currently failing in the incidents, by kind and state.", []string{"kind", "state"}, nil)})
}

type incidentCollector struct {
	read                   IncidentCounts
	every                  time.Duration
	incidents, occurrences *prometheus.Desc

	mu     sync.Mutex
	at     time.Time
	counts map[[2]string]IncidentCount
}

func (c *incidentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.incidents
	ch <- c.occurrences
}

func (c *incidentCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil || time.Since(c.at) >= c.every {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		list, err := c.read(ctx)
		cancel()
		if err != nil {
			// Not an invalid metric: that would fail the whole scrape (the
			// instance would look down). The last counts are served until a
			// read succeeds; before any, the families are absent.
			c.at = time.Now()
			if c.counts == nil {
				return
			}
			list = nil
			for _, x := range c.counts {
				list = append(list, x)
			}
		}
		c.counts, c.at = map[[2]string]IncidentCount{}, time.Now()
		for _, x := range list {
			c.counts[[2]string{x.Kind, x.State}] = x
		}
	}
	for _, k := range incidentKinds {
		for _, s := range incidentStates {
			x := c.counts[[2]string{k, s}]
			ch <- prometheus.MustNewConstMetric(c.incidents, prometheus.GaugeValue, float64(x.Incidents), k, s)
			ch <- prometheus.MustNewConstMetric(c.occurrences, prometheus.GaugeValue, float64(x.Occurrences), k, s)
		}
	}
}
