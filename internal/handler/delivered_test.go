package handler_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// withAPIVersion returns payload with its api_version set to v ("" removes it).
func withAPIVersion(t *testing.T, payload []byte, v string) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(payload, &m))
	if v == "" {
		delete(m, "api_version")
	} else {
		m["api_version"] = v
	}
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

// Every event given to the handler is counted by source (not by account:
// one series per merchant is unbounded); one
// whose api_version differs from the configured STRIPE_API_VERSION is
// counted as unexpected (the version-drift alert), one without a version
// (a thin event's re-drive) is not.
func TestDeliveriesCountedBySourceAndUnexpectedAPIVersion(t *testing.T) {
	e := newEnv(t)
	m := metrics.New()
	h := handler.New(handler.Config{PlatformAccount: "acct_platform_test", EventTTL: 720 * time.Hour, APIVersion: "2023-10-16"},
		e.store, ledger.New(e.pool), slog.New(slog.NewTextHandler(io.Discard, nil)), handler.WithObserver(m))
	acct := "acct_delivered01"
	cases := []struct {
		name    string
		version string
		source  stripeevent.Source
	}{
		{"expected version", "2023-10-16", stripeevent.SourceWebhook},
		{"newer version", "2025-09-30.clover", stripeevent.SourceWebhook},
		{"older version, eventbridge", "2022-11-15", stripeevent.SourceEventBridge},
		{"no version", "", stripeevent.SourceWebhook},
	}
	for _, tc := range cases {
		payload := withAPIVersion(t, stripetest.Event{Fixture: "payment_intent.succeeded", Account: &acct}.Build(t), tc.version)
		_, err := h.Handle(context.Background(), parse(t, payload), payload, tc.source)
		require.NoError(t, err, tc.name)
	}
	assert.Equal(t, map[string]float64{"webhook": 3, "eventbridge": 1},
		counters(t, m.Registry, "stripe_payments_events_received_total", "source"))
	assert.Equal(t, map[string]float64{"|webhook": 3, "|eventbridge": 1},
		counters(t, m.Registry, "stripe_payments_events_received_total", "stripe_account", "source"),
		"no series carries the account")
	assert.Equal(t, map[string]float64{"2025-09-30.clover|webhook": 1, "2022-11-15|eventbridge": 1},
		counters(t, m.Registry, "stripe_payments_events_unexpected_api_version_total", "api_version", "source"),
		"the expected version and a missing one are not unexpected")
}

// counters gathers a counter family as label values joined by | -> value.
func counters(t *testing.T, g prometheus.Gatherer, name string, labels ...string) map[string]float64 {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			out[labelKey(mt, labels)] = mt.GetCounter().GetValue()
		}
	}
	return out
}

func labelKey(mt *dto.Metric, labels []string) string {
	key := ""
	for i, l := range labels {
		if i > 0 {
			key += "|"
		}
		for _, lp := range mt.GetLabel() {
			if lp.GetName() == l {
				key += lp.GetValue()
			}
		}
	}
	return key
}

// A delivery is counted as received only once it is taken in: one ignored
// for its livemode, or refused (503) while the events table cannot take
// it, is not (the silence alerts would read the refusals as traffic).
func TestIgnoredAndRefusedDeliveriesAreNotCounted(t *testing.T) {
	e := newEnv(t)
	m := metrics.New()
	table := &flakyTable{Store: e.store}
	q := recordq.New(e.pool, table, recordq.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = q.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	for !q.Running() {
		time.Sleep(time.Millisecond)
	}
	h := handler.New(handler.Config{PlatformAccount: "acct_platform_test", EventTTL: 720 * time.Hour},
		e.store.WithPending(q), ledger.New(e.pool), slog.New(slog.NewTextHandler(io.Discard, nil)),
		handler.WithObserver(m), handler.WithRecordQueue(q))
	acct := "acct_counted0001"
	received := func() float64 {
		return counters(t, m.Registry, "stripe_payments_events_received_total", "source")["webhook"]
	}
	bg := context.Background()

	live := stripetest.Event{Fixture: "customer.created", Account: &acct, Livemode: stripetest.Ptr(true)}.Build(t)
	outcome, err := h.Handle(bg, parse(t, live), live, stripeevent.SourceWebhook)
	require.NoError(t, err)
	require.Equal(t, stripeevent.Ignored, outcome)
	assert.Zero(t, received(), "a livemode mismatch is ignored, not received")

	table.down.Store(true)
	accepted := 0.0
	deadline := time.Now().Add(20 * time.Second)
	for {
		require.True(t, time.Now().Before(deadline), "deliveries still accepted while the table is down")
		payload := stripetest.Event{Fixture: "customer.created", Account: &acct}.Build(t)
		if _, err := h.Handle(bg, parse(t, payload), payload, stripeevent.SourceWebhook); err != nil {
			require.ErrorIs(t, err, recordq.ErrUnavailable)
			break
		}
		accepted++
		time.Sleep(5 * time.Millisecond)
	}
	assert.Equal(t, accepted, received(), "the refused delivery is not counted")
	table.down.Store(false)
}
