package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/poller"
)

// TestSilentAccounts: an account whose full listing finds events no
// delivery brought, and not one event delivered by webhook, is silent; one
// that misses some deliveries but gets others is not (the webhook gap
// alone). The metrics count the silent accounts without naming them; the
// per-account figures (gap, silent) are kept for the console. A delivered
// event in a later run clears the mark, and an account no longer
// reconciled is forgotten.
func TestSilentAccounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obs := metrics.NewPoller(prometheus.NewRegistry())
	e.observer = obs
	now := e.clock()

	// Each account is known to the poller by an earlier delivery the
	// listing does not include.
	for _, acct := range []string{acctA, acctB} {
		_, payload := e.event("payment_intent.succeeded", acct, now.Add(-40*24*time.Hour))
		e.deliver(payload)
	}
	// acctA: two events, neither delivered. acctB: one delivered, one not.
	for i := range 2 {
		_, payload := e.event("payment_intent.succeeded", acctA, now.Add(-time.Duration(10+i)*time.Minute))
		e.list(acctA, payload)
	}
	_, delivered := e.event("payment_intent.succeeded", acctB, now.Add(-12*time.Minute))
	e.list(acctB, delivered)
	e.deliver(delivered)
	_, missed := e.event("payment_intent.succeeded", acctB, now.Add(-11*time.Minute))
	e.list(acctB, missed)

	rep, err := e.poller(modeInProcess, poller.Config{}).Run(context.Background(), poller.Window{})
	require.NoError(t, err)
	byAccount := map[string]poller.AccountReport{}
	for _, ar := range rep.Accounts {
		byAccount[ar.Account] = ar
	}
	require.Contains(t, byAccount, acctA)
	require.Contains(t, byAccount, acctB)
	assert.Equal(t, 0, byAccount[acctA].Delivered)
	assert.Equal(t, 1, byAccount[acctB].Delivered)

	assert.Equal(t, 1.0, value(t, obs.SilentAccounts), "acctA only")
	assert.Equal(t, 3.0, value(t, obs.WebhookGaps))
	a, ok := obs.Account(acctA)
	require.True(t, ok)
	assert.Equal(t, metrics.PollerAccount{WebhookGap: 2, CheckpointAge: a.CheckpointAge, Silent: true}, a)
	b, ok := obs.Account(acctB)
	require.True(t, ok)
	assert.Equal(t, metrics.PollerAccount{WebhookGap: 1, CheckpointAge: b.CheckpointAge, Silent: false}, b)

	t.Run("a delivered event clears the mark", func(t *testing.T) {
		e.setNow(now.Add(time.Minute))
		_, payload := e.event("payment_intent.succeeded", acctA, now.Add(-time.Second))
		e.list(acctA, payload)
		e.deliver(payload)
		_, err := e.poller(modeInProcess, poller.Config{}).Run(context.Background(), poller.Window{})
		require.NoError(t, err)
		assert.Equal(t, 0.0, value(t, obs.SilentAccounts))
		a, _ := obs.Account(acctA)
		assert.False(t, a.Silent)
		assert.Equal(t, 2, a.WebhookGap, "the gap since the start stays")
	})

	t.Run("an account no longer reconciled is forgotten", func(t *testing.T) {
		obs.Silent(acctA, true)
		obs.CheckpointAge(acctA, 5*time.Hour)
		require.Equal(t, 1.0, value(t, obs.SilentAccounts))
		obs.Accounts([]string{acctB})
		assert.Equal(t, 0.0, value(t, obs.SilentAccounts))
		assert.Less(t, value(t, obs.OldestCheckpointAge), (5 * time.Hour).Seconds())
		_, ok := obs.Account(acctA)
		assert.False(t, ok)
	})
}

// value reads a counter's or a gauge's value.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.GetGauge().GetValue()
}
