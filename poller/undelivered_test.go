package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/poller"
)

// TestUndeliveredListingBetweenFullListings: one poller (as serve keeps
// one) on a busy account. A run lists everything while it has no estimate
// of the account, when the full listing is expected to take no more calls
// than the undelivered one, and when the checkpoint is FullEvery old; in
// between it lists only GET /v1/events?delivery_success=false, which finds
// what the webhook never brought (missing) or brought and failed, feeds the
// same diff and replay, and leaves the checkpoint to the full listings.
// FullEvery < 0 lists everything every run. Either way every event ends
// processed once.
func TestUndeliveredListingBetweenFullListings(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fullEvery time.Duration
		want      []poller.Listing
	}{
		{"default", 0, []poller.Listing{poller.ListFull, poller.ListFull, poller.ListUndelivered, poller.ListFull}},
		{"always full", -1, []poller.Listing{poller.ListFull, poller.ListFull, poller.ListFull, poller.ListFull}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			now0 := e.clock()
			ctx := context.Background()
			// One event a minute from an hour ago to 29 min ahead: 90
			// events, about 11 in a checkpointed window (overlap 10 min),
			// so 3 pages of 5.
			undelivered := map[int]bool{1: true, 51: true, 61: true, 62: true, 71: true, 81: true}
			ids := make([]string, 90)
			for i := range ids {
				id, payload := e.event("payment_intent.succeeded", acctA, now0.Add(time.Duration(i-60)*time.Minute))
				ids[i] = id
				e.list(acctA, payload)
				switch {
				case i == 62: // delivered, failed in the service (5xx): Stripe counts it undelivered
					e.recordOnly(payload, true)
				case undelivered[i]:
				default:
					e.deliver(payload)
					e.api.Delivered(acctA, true, id)
				}
			}
			p := e.poller(modeInProcess, poller.Config{Accounts: []string{acctA}, PageSize: 5, FullEvery: tc.fullEvery})
			type run struct {
				at             time.Duration
				wantReplayed   []int
				wantCheckpoint time.Duration // from now0
			}
			runs := []run{
				{0, []int{1, 51}, -settle},                               // no checkpoint: full, lookback
				{time.Minute, nil, time.Minute - settle},                 // estimate from a 72 h window: 1 page
				{3 * time.Minute, []int{61, 62}, 3*time.Minute - settle}, // ~12 events: 3 pages against 1
				{31 * time.Minute, []int{71, 81}, 31*time.Minute - settle},
			}
			for i, r := range runs {
				e.setNow(now0.Add(r.at))
				before := e.api.Stats().ByAccount[acctA]
				rep, err := p.Run(ctx, poller.Window{})
				require.NoError(t, err, "run %d", i)
				require.Len(t, rep.Accounts, 1)
				ar := rep.Accounts[0]
				calls := e.api.Stats().ByAccount[acctA] - before
				assert.Equal(t, tc.want[i], ar.Listing, "run %d", i)
				assert.Equal(t, len(r.wantReplayed), ar.Replayed, "run %d: %s", i, ar.Summary())
				for _, n := range r.wantReplayed {
					rec, ok := e.record(ids[n])
					require.True(t, ok, "run %d: event %d recorded", i, n)
					assert.Equal(t, events.StatusProcessed, rec.Status, "run %d: event %d", i, n)
				}
				cp, ok := e.checkpoint(acctA)
				require.True(t, ok)
				if ar.Listing == poller.ListUndelivered {
					assert.Equal(t, 1, calls, "run %d: one page of undelivered events", i)
					// 51 (replayed by the first run: Stripe still counts it
					// undelivered), 61 and 62.
					assert.Equal(t, 3, ar.Listed, "run %d: the window's undelivered events only", i)
					assert.Equal(t, 1, ar.AlreadyProcessed, "run %d", i)
					assert.Equal(t, now0.Add(runs[i-1].wantCheckpoint), cp, "run %d: only a full listing moves the checkpoint", i)
					assert.Contains(t, ar.Summary(), "undelivered")
				} else {
					assert.Equal(t, now0.Add(r.wantCheckpoint), cp, "run %d", i)
					assert.GreaterOrEqual(t, calls, (ar.Listed+4)/5, "run %d", i)
				}
			}
			for i, id := range ids {
				assert.Equal(t, 1, e.ledger(id), "event %d applied once", i)
				assert.Equal(t, 1, e.effects(id), "event %d", i)
			}
		})
	}
}
