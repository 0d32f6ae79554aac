package ops

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
)

type savedCheckpoints []ledger.Saved

func (s savedCheckpoints) List(context.Context, int) ([]ledger.Saved, error) { return s, nil }

// The metrics carry no account label, so the overview takes each account's
// webhook gap and silent mark from the poller's per-account figures: an
// account the poller has not reconciled here shows no gap (unknown, -1),
// and without a poller every gap is unknown.
func TestCheckpointsShowThePollerFiguresPerAccount(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	saved := savedCheckpoints{
		{Account: "acct_1Silent00000000", Checkpoint: now.Add(-2 * time.Hour)},
		{Account: "acct_1Partial0000000", Checkpoint: now.Add(-time.Minute)},
		{Account: "acct_1Unknown0000000", Checkpoint: now.Add(-time.Minute)},
	}
	p := metrics.NewPoller(prometheus.NewRegistry())
	p.Accounts([]string{"acct_1Silent00000000", "acct_1Partial0000000"})
	p.WebhookGap("acct_1Silent00000000", 4)
	p.Silent("acct_1Silent00000000", true)
	p.WebhookGap("acct_1Partial0000000", 1)
	p.Silent("acct_1Partial0000000", false)

	list, err := checkpoints(context.Background(), saved, p, now)
	require.NoError(t, err)
	require.Len(t, list, 3)
	assert.Equal(t, Checkpoint{Account: "acct_1Silent00000000", Checkpoint: now.Add(-2 * time.Hour), Age: 2 * time.Hour, Gap: 4, Silent: true}, list[0])
	assert.Equal(t, Checkpoint{Account: "acct_1Partial0000000", Checkpoint: now.Add(-time.Minute), Age: time.Minute, Gap: 1}, list[1])
	assert.Equal(t, Checkpoint{Account: "acct_1Unknown0000000", Checkpoint: now.Add(-time.Minute), Age: time.Minute, Gap: -1}, list[2])

	var none *metrics.Poller // serve without a poller
	list, err = checkpoints(context.Background(), saved, none, now)
	require.NoError(t, err)
	for _, c := range list {
		assert.Equal(t, -1, c.Gap, c.Account)
		assert.False(t, c.Silent, c.Account)
	}
}
