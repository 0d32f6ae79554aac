// Package monitoring_test checks the monitoring assets against the service:
// every metric a rule or a dashboard panel names is one the service
// registers, every alert has a promtool unit test, and promtool accepts the
// rules and passes their tests.
package monitoring_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
)

const (
	rulesFile     = "prometheus/alerts.yml"
	rulesTestFile = "prometheus/alerts_test.yml"
	dashboardFile = "grafana/stripe-payments.json"
)

// Prometheus adds these to every scrape; the service does not export them.
var scrapeMetrics = map[string]bool{"up": true}

var metricName = regexp.MustCompile(`\b(stripe_payments_[a-z0-9_]+|up)\b`)

// namesIn returns the metric names an expression text mentions, histogram
// series (_bucket, _sum, _count) folded into their family.
func namesIn(texts ...string) map[string]bool {
	out := map[string]bool{}
	for _, t := range texts {
		for _, m := range metricName.FindAllString(t, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(m, suffix); ok && base != "" {
					m = base + "\x00" + m // resolved below: the family or the series
					break
				}
			}
			out[m] = true
		}
	}
	return out
}

// exported is the set of metric families the running service registers.
// A registry lists no descriptors, so each name is probed: registering a
// fresh collector under a name the registry holds fails.
func exported(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "monitoring test probe"})
	err := reg.Register(probe)
	if err == nil {
		reg.Unregister(probe)
		return false
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		return true
	}
	// A different label set or help text under the same name: registered.
	return strings.Contains(err.Error(), name)
}

func TestEveryMetricNamedIsExported(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct{ List []struct{ Query any } }
	}
	require.NoError(t, json.Unmarshal(raw, &dash), "dashboard JSON")
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if s, ok := v.Query.(string); ok {
			exprs = append(exprs, s)
		}
	}
	require.NotEmpty(t, exprs, "the dashboard has panels with queries")

	a := apptest.New(t, apptest.Options{})
	reg := a.Metrics.Registry
	// The poller's collectors are registered with the registry (serve's
	// poller and the console share them); the EventBridge intake's only
	// when it runs (EVENTBRIDGE_QUEUE_URL): register them as it does.
	metrics.NewEventBridge(reg)
	// The billing queue's, likewise only when it runs (BILLING_QUEUE_URL).
	metrics.NewBillingQueue(reg)

	check := func(source string, names map[string]bool) {
		require.NotEmpty(t, names, source)
		var missing []string
		for n := range names {
			if base, series, ok := strings.Cut(n, "\x00"); ok {
				if exported(t, reg, base) || exported(t, reg, series) {
					continue
				}
				missing = append(missing, series)
				continue
			}
			if scrapeMetrics[n] || exported(t, reg, n) {
				continue
			}
			missing = append(missing, n)
		}
		sort.Strings(missing)
		assert.Empty(t, missing, "%s names metrics the service does not export", source)
	}
	check(rulesFile, namesIn(string(rules)))
	check(dashboardFile, namesIn(exprs...))

	// The probe itself works: a made-up name is not exported.
	assert.False(t, exported(t, reg, "stripe_payments_no_such_metric_total"))
}

var alertName = regexp.MustCompile(`(?m)^\s*-?\s*alert:\s*(\S+)`)
var testedAlert = regexp.MustCompile(`(?m)^\s*alertname:\s*(\S+)`)

// Every alert has a promtool unit test that expects it to fire.
func TestEveryAlertHasAUnitTest(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	tests, err := os.ReadFile(rulesTestFile)
	require.NoError(t, err)
	tested := map[string]bool{}
	for _, m := range testedAlert.FindAllStringSubmatch(string(tests), -1) {
		tested[m[1]] = true
	}
	alerts := alertName.FindAllStringSubmatch(string(rules), -1)
	require.NotEmpty(t, alerts)
	for _, m := range alerts {
		assert.True(t, tested[m[1]], "alert %s has no promtool test", m[1])
	}
}

// promtool (Debian's prometheus package; scripts/test.sh installs it)
// accepts the rules and passes their unit tests.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found on PATH: install it with apt-get install -y prometheus (scripts/test.sh does)")
	}
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

var runbookURL = regexp.MustCompile(`(?m)^\s*runbook_url:\s*"?([^"\s]+)"?`)

// Every runbook_url names a page that exists in the repository.
func TestRunbookURLsExist(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	urls := runbookURL.FindAllStringSubmatch(string(rules), -1)
	require.NotEmpty(t, urls)
	for _, m := range urls {
		_, err := os.Stat("../" + m[1])
		assert.NoError(t, err, "runbook_url %s", m[1])
	}
	// The probe works: a page that does not exist is reported.
	_, err = os.Stat("../docs/runbooks/NoSuchAlert.md")
	assert.True(t, os.IsNotExist(err))
}

// The dashboard's panels have unique ids, fit the 24-column grid, do not
// overlap, and include the incidents and Stripe budget panels.
func TestDashboardLayout(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			ID      int
			Type    string
			Title   string
			GridPos struct{ X, Y, W, H int }
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	ids := map[int]string{}
	exprs := ""
	for i, p := range dash.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		assert.True(t, g.X >= 0 && g.W > 0 && g.H > 0 && g.X+g.W <= 24, "panel %q: gridPos %+v", p.Title, g)
		for _, q := range dash.Panels[:i] {
			h := q.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("panels %q and %q overlap", q.Title, p.Title)
			}
		}
		if p.Type != "row" {
			assert.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs += tg.Expr + "\n"
		}
	}
	for _, name := range []string{"stripe_payments_incidents", "stripe_payments_incident_occurrences",
		"stripe_payments_stripe_budget_granted_total", "stripe_payments_stripe_budget_wait_seconds_bucket",
		"stripe_payments_stripe_budget_rate_limited_total", "stripe_payments_stripe_budget_fallback"} {
		assert.Regexp(t, regexp.MustCompile(`\b`+name+`\b`), exprs, "a panel shows %s", name)
	}
}
