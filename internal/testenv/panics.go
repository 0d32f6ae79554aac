package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// PanicCount reads stripe_payments_panics_total{goroutine=name} from reg
// (0 when the series is absent).
func PanicCount(t testing.TB, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != "stripe_payments_panics_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "goroutine" && l.GetValue() == name {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
