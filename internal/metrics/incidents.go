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

// maxIncidentCountsAge is how long the last counts are served while reads
// fail: older, they are dropped (absent, not stale numbers presented as now).
const maxIncidentCountsAge = 5 * time.Minute

// WatchIncidents exports stripe_payments_incidents{kind,state} and
// stripe_payments_incident_occurrences{kind,state}, read on scrape at most
// every 30 s (the groups are computed from Postgres on each read), with
// stripe_payments_incident_reads_failed_total and
// stripe_payments_incidents_last_read_timestamp_seconds (the last read
// that succeeded).
func (m *Metrics) WatchIncidents(read IncidentCounts) { m.WatchIncidentsAt(read, time.Now) }

// WatchIncidentsAt is WatchIncidents on the clock now.
func (m *Metrics) WatchIncidentsAt(read IncidentCounts, now func() time.Time) {
	c := &incidentCollector{read: read, every: 30 * time.Second, maxAge: maxIncidentCountsAge, now: now,
		incidents: prometheus.NewDesc("stripe_payments_incidents",
			"Incidents (failures grouped by cause, type and account), by kind and state.", []string{"kind", "state"}, nil),
		occurrences: prometheus.NewDesc("stripe_payments_incident_occurrences",
			"Occurrences currently failing in the incidents, by kind and state.", []string{"kind", "state"}, nil),
		lastRead: prometheus.NewDesc("stripe_payments_incidents_last_read_timestamp_seconds",
			"When the incident counts were last read successfully (Unix seconds).", nil, nil),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_incident_reads_failed_total",
			Help: "Reads of the incident counts that failed or timed out (the last counts are served up to 5 min).",
		}),
	}
	m.Registry.MustRegister(c)
}

type incidentCollector struct {
	read                   IncidentCounts
	every, maxAge          time.Duration
	now                    func() time.Time
	incidents, occurrences *prometheus.Desc
	lastRead               *prometheus.Desc
	failed                 prometheus.Counter

	mu sync.Mutex
	// tried: the last read; ok: the last read that succeeded, whose
	// counts are counts (nil before any).
	tried, ok time.Time
	counts    map[[2]string]IncidentCount
}

func (c *incidentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.incidents
	ch <- c.occurrences
	ch <- c.lastRead
	c.failed.Describe(ch)
}

func (c *incidentCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.tried.IsZero() || now.Sub(c.tried) >= c.every {
		c.tried = now
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		list, err := c.read(ctx)
		cancel()
		if err != nil {
			// Not an invalid metric: that would fail the whole scrape (the
			// instance would look down). Counted; the last counts are
			// served while younger than maxAge.
			c.failed.Inc()
		} else {
			c.counts, c.ok = map[[2]string]IncidentCount{}, now
			for _, x := range list {
				c.counts[[2]string{x.Kind, x.State}] = x
			}
		}
	}
	c.failed.Collect(ch)
	if c.ok.IsZero() {
		return // never read: the families are absent
	}
	ch <- prometheus.MustNewConstMetric(c.lastRead, prometheus.GaugeValue, float64(c.ok.UnixNano())/1e9)
	if now.Sub(c.ok) > c.maxAge {
		return // too old to pass for the current counts
	}
	for _, k := range incidentKinds {
		for _, s := range incidentStates {
			x := c.counts[[2]string{k, s}]
			ch <- prometheus.MustNewConstMetric(c.incidents, prometheus.GaugeValue, float64(x.Incidents), k, s)
			ch <- prometheus.MustNewConstMetric(c.occurrences, prometheus.GaugeValue, float64(x.Occurrences), k, s)
		}
	}
}
