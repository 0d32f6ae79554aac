package poller_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/poller"
)

const settle = poller.DefaultSettle

func TestRunReconcilesThePlatformAndConnectedAccounts(t *testing.T) {
	for _, mode := range []string{modeTarget, modeInProcess} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			// Connected listings without `account`: the poller must still
			// record the events under the connected account.
			e.api.OmitAccount(true)
			now := e.clock()
			type placed struct{ id, account, state string }
			var all []placed
			accounts := []string{platform, acctA, acctB}
			for _, acct := range accounts {
				for i, state := range []string{"processed", "missing", "processed", "received", "missing", "failed", "processed"} {
					id, payload := e.event("payment_intent.succeeded", acct, now.Add(-time.Duration(10+7*i)*time.Minute))
					e.list(acct, payload)
					switch state {
					case "processed":
						e.deliver(payload)
					case "received":
						e.recordOnly(payload, false)
					case "failed":
						e.recordOnly(payload, true)
					}
					all = append(all, placed{id, acct, state})
				}
			}

			rep, err := e.poller(mode, poller.Config{}).Run(context.Background(), poller.Window{})
			require.NoError(t, err)
			require.Len(t, rep.Accounts, 3)
			for i, acct := range accounts {
				ar := rep.Accounts[i]
				assert.Equal(t, acct, ar.Account, "the platform first, then connected accounts")
				assert.Equal(t, poller.Counts{Listed: 7, AlreadyProcessed: 3, Missing: 2, Unprocessed: 2, Replayed: 4}, ar.Counts, acct)
				assert.Equal(t, now.Add(-settle), ar.Checkpoint, acct)
				cp, ok := e.checkpoint(acct)
				assert.True(t, ok)
				assert.Equal(t, now.Add(-settle), cp, "checkpoint persisted for %s", acct)
			}
			for _, ev := range all {
				rec, ok := e.record(ev.id)
				require.True(t, ok, "%s (%s) recorded", ev.id, ev.state)
				assert.Equal(t, events.StatusProcessed, rec.Status, ev.state)
				assert.Equal(t, ev.account, rec.StripeAccount, ev.state)
				want := stripeevent.SourceWebhook
				if ev.state == "missing" {
					want = stripeevent.SourcePoller
				}
				assert.Equal(t, want, rec.Source, ev.state)
				assert.Equal(t, 1, e.ledger(ev.id), "effects applied exactly once: %s", ev.state)
				if mode == modeInProcess {
					assert.Equal(t, 1, e.effects(ev.id), ev.state)
				}
			}
			stats := e.api.Stats()
			assert.ElementsMatch(t, []string{"", acctA, acctB}, keys(stats.ByAccount),
				"the platform is listed without Stripe-Account, connected accounts with it")

			t.Run("a second run replays nothing", func(t *testing.T) {
				e.setNow(now.Add(time.Minute))
				rep, err := e.poller(mode, poller.Config{}).Run(context.Background(), poller.Window{})
				require.NoError(t, err)
				for _, ar := range rep.Accounts {
					// Only the newest event lies in [checkpoint - overlap, ...).
					assert.Equal(t, poller.Counts{Listed: 1, AlreadyProcessed: 1}, ar.Counts, ar.Account)
					assert.Equal(t, now.Add(time.Minute-settle), ar.Checkpoint)
				}
				assert.Contains(t, rep.Summary(), "replayed 0, failed 0")
			})
		})
	}
}

func TestLateEventsInsideTheOverlapAreCaught(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := e.clock()
	ctx := context.Background()
	_, err := e.poller(modeInProcess, poller.Config{}).Run(ctx, poller.Window{})
	require.NoError(t, err)
	cp, ok := e.checkpoint(platform)
	require.True(t, ok)

	// Two events become listable only now, created before the checkpoint.
	inside, insidePayload := e.event("invoice.paid", platform, cp.Add(-5*time.Minute))
	outside, outsidePayload := e.event("invoice.paid", platform, cp.Add(-15*time.Minute))
	e.list(platform, insidePayload)
	e.list(platform, outsidePayload)
	e.setNow(now.Add(time.Minute))

	rep, err := e.poller(modeInProcess, poller.Config{}).Run(ctx, poller.Window{})
	require.NoError(t, err)
	ar := rep.Accounts[0]
	assert.Equal(t, cp.Add(-poller.DefaultOverlap), ar.From)
	assert.Equal(t, poller.Counts{Listed: 1, Missing: 1, Replayed: 1}, ar.Counts)
	rec, ok := e.record(inside)
	require.True(t, ok, "the late event inside the overlap is replayed")
	assert.Equal(t, events.StatusProcessed, rec.Status)
	_, ok = e.record(outside)
	assert.False(t, ok, "an event later than the overlap needs a backfill")

	t.Run("a backfill catches the rest and leaves the checkpoint alone", func(t *testing.T) {
		before, _ := e.checkpoint(platform)
		rep, err := e.poller(modeInProcess, poller.Config{}).Run(ctx, poller.Window{Since: cp.Add(-time.Hour), Until: cp})
		require.NoError(t, err)
		assert.Equal(t, poller.Counts{Listed: 2, AlreadyProcessed: 1, Missing: 1, Replayed: 1}, rep.Accounts[0].Counts)
		_, ok := e.record(outside)
		assert.True(t, ok)
		after, _ := e.checkpoint(platform)
		assert.Equal(t, before, after)
		assert.Contains(t, rep.Summary(), "(backfill)")
	})
}

func TestWindowAcrossMidnightUTC(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	midnight := time.Now().UTC().Truncate(24 * time.Hour)
	e.setNow(midnight.Add(5*time.Minute + settle))          // the window ends at 00:05:00
	cfg := poller.Config{Lookback: 15*time.Minute + settle} // and starts at 23:50:00

	offsets := map[time.Duration]bool{ // created relative to midnight → inside the window
		-11 * time.Minute:           false,
		-10 * time.Minute:           true,
		-time.Second:                true,
		0:                           true,
		5*time.Minute - time.Second: true,
		5 * time.Minute:             false, // until is exclusive: the next run lists it
	}
	ids := map[string]bool{}
	for off, inside := range offsets {
		id, payload := e.event("payment_intent.succeeded", platform, midnight.Add(off))
		e.list(platform, payload)
		ids[id] = inside
	}
	rep, err := e.poller(modeInProcess, cfg).Run(ctx, poller.Window{})
	require.NoError(t, err)
	assert.Equal(t, poller.Counts{Listed: 4, Missing: 4, Replayed: 4}, rep.Accounts[0].Counts)
	dates := map[string]int{}
	for id, inside := range ids {
		rec, ok := e.record(id)
		assert.Equal(t, inside, ok, id)
		if ok {
			dates[rec.Date()]++
		}
	}
	assert.Equal(t, map[string]int{midnight.Add(-time.Hour).Format(events.DateLayout): 2, midnight.Format(events.DateLayout): 2}, dates)

	t.Run("the stuck sweep queries both dates", func(t *testing.T) {
		var stuck []string
		for _, off := range []time.Duration{-3 * time.Minute, 2 * time.Minute, 20 * time.Minute} {
			// Recorded, never processed, and not listable: an account the
			// service does not know, or past Stripe's retention.
			id, payload := e.event("charge.refunded", "acct_1UnknownToTheLedger", midnight.Add(off))
			e.recordOnly(payload, off > 0)
			stuck = append(stuck, id)
		}
		rep, err := e.poller(modeInProcess, cfg).Sweep(ctx, poller.Window{Since: midnight.Add(-10 * time.Minute), Until: midnight.Add(10 * time.Minute)})
		require.NoError(t, err)
		assert.Equal(t, 6, rep.Listed, "4 replayed before + 2 stuck")
		assert.Equal(t, 2, rep.Unprocessed)
		assert.Equal(t, 2, rep.Replayed)
		for i, id := range stuck {
			rec, ok := e.record(id)
			require.True(t, ok)
			want := events.StatusProcessed
			if i == 2 {
				want = events.StatusFailed // outside the sweep's window
			}
			assert.Equal(t, want, rec.Status, id)
			assert.Equal(t, "acct_1UnknownToTheLedger", rec.StripeAccount)
		}
		assert.Equal(t, 1, e.effects(stuck[0]))
	})
}

func TestCheckpointSurvivesARestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	now := e.clock()
	first, payload := e.event("payment_intent.succeeded", acctA, now.Add(-20*time.Minute))
	e.list(acctA, payload)
	rep, err := e.poller(modeInProcess, poller.Config{Accounts: []string{acctA}}).Run(ctx, poller.Window{})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Accounts[0].Replayed)
	cp, ok := e.checkpoint(acctA)
	require.True(t, ok)
	require.Equal(t, now.Add(-settle), cp)

	// The process restarts an hour later: a new program on the same stores.
	e.app = apptest.Start(t, apptest.Options{Env: e.appVars(), Stripe: e.api})
	e.setNow(now.Add(time.Hour))
	old, oldPayload := e.event("payment_intent.succeeded", acctA, cp.Add(-30*time.Minute)) // before the overlap
	recent, recentPayload := e.event("payment_intent.succeeded", acctA, now.Add(30*time.Minute))
	e.list(acctA, oldPayload)
	e.list(acctA, recentPayload)

	rep, err = e.poller(modeTarget, poller.Config{Accounts: []string{acctA}}).Run(ctx, poller.Window{})
	require.NoError(t, err)
	ar := rep.Accounts[0]
	assert.Equal(t, cp.Add(-poller.DefaultOverlap), ar.From, "the window starts from the persisted checkpoint, not the first-run lookback")
	assert.Equal(t, poller.Counts{Listed: 1, Missing: 1, Replayed: 1}, ar.Counts)
	_, ok = e.record(recent)
	assert.True(t, ok)
	_, ok = e.record(old)
	assert.False(t, ok)
	_, ok = e.record(first)
	assert.True(t, ok)
	cp, _ = e.checkpoint(acctA)
	assert.Equal(t, now.Add(time.Hour-settle), cp)
}

func TestDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := e.clock()
	missing, p1 := e.event("payment_intent.succeeded", platform, now.Add(-30*time.Minute))
	received, p2 := e.event("invoice.paid", platform, now.Add(-20*time.Minute))
	_, p3 := e.event("customer.created", platform, now.Add(-10*time.Minute))
	for _, p := range [][]byte{p1, p2, p3} {
		e.list(platform, p)
	}
	e.recordOnly(p2, false)
	e.deliver(p3)

	rep, err := e.poller(modeInProcess, poller.Config{DryRun: true}).Run(context.Background(), poller.Window{})
	require.NoError(t, err)
	ar := rep.Accounts[0]
	var would []string
	for _, c := range ar.WouldReplay {
		would = append(would, c.ID+":"+string(c.Reason))
	}
	assert.Equal(t, []string{missing + ":missing", received + ":received"}, would, "oldest first")
	assert.Equal(t, poller.Counts{Listed: 3, AlreadyProcessed: 1, Missing: 1, Unprocessed: 1}, ar.Counts)
	assert.Contains(t, ar.Summary(), "would replay 2")

	_, ok := e.record(missing)
	assert.False(t, ok)
	rec, _ := e.record(received)
	assert.Equal(t, events.StatusReceived, rec.Status)
	assert.Equal(t, 1, rec.Attempts)
	assert.Zero(t, e.ledger(received))
	_, ok = e.checkpoint(platform)
	assert.False(t, ok, "a dry run saves no checkpoint")

	t.Run("stuck sweep", func(t *testing.T) {
		rep, err := e.poller(modeInProcess, poller.Config{DryRun: true}).Sweep(context.Background(), poller.Window{})
		require.NoError(t, err)
		require.Len(t, rep.WouldReplay, 1)
		assert.Equal(t, received, rep.WouldReplay[0].ID)
		rec, _ := e.record(received)
		assert.Equal(t, events.StatusReceived, rec.Status)
	})
}

func TestRateLimitedAnswersSlowTheListingDownWithoutLosingEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	now := e.clock()
	var ids []string
	for i := range 40 {
		id, payload := e.event("payment_intent.succeeded", acctA, now.Add(-time.Duration(i+1)*time.Minute))
		e.list(acctA, payload)
		ids = append(ids, id)
	}
	// Every other request is refused with 429 rate_limit.
	e.api.RateLimit(func(n int) bool { return n%2 == 0 })
	const minBackoff = 40 * time.Millisecond
	p := e.pollerWith(modeInProcess, poller.Config{Accounts: []string{acctA}, PageSize: 5, Lookback: time.Hour},
		poller.APIConfig{Rate: 1000, MinBackoff: minBackoff, MaxBackoff: 80 * time.Millisecond})
	rep, err := p.Run(ctx, poller.Window{})
	require.NoError(t, err)
	assert.Equal(t, poller.Counts{Listed: 40, Missing: 40, Replayed: 40}, rep.Accounts[0].Counts, "no event lost")
	for _, id := range ids {
		_, ok := e.record(id)
		assert.True(t, ok, id)
	}
	stats := e.api.Stats()
	require.Equal(t, 7, stats.RateLimited, "every page but the first refused once")
	for i := 1; i < len(stats.Times)-1; i += 2 { // request i (0-based) was refused
		gap := stats.Times[i+1].Sub(stats.Times[i])
		assert.GreaterOrEqual(t, gap, minBackoff/2, "request %d came %s after a 429", i+2, gap)
	}
	assert.Contains(t, e.logs.String(), "stripe rate limited the events listing")

	t.Run("a listing that stays rate limited fails and holds the checkpoint", func(t *testing.T) {
		e.api.RateLimit(func(int) bool { return true })
		before, _ := e.checkpoint(acctA)
		e.setNow(now.Add(time.Hour))
		p := e.pollerWith(modeInProcess, poller.Config{Accounts: []string{acctA}},
			poller.APIConfig{MaxRateLimited: 2, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
		rep, err := p.Run(ctx, poller.Window{})
		require.Error(t, err)
		assert.ErrorContains(t, rep.Accounts[0].Err, "still rate limited after 3 attempts")
		after, _ := e.checkpoint(acctA)
		assert.Equal(t, before, after)
	})
}

func TestAFailedReplayHoldsTheCheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	now := e.clock()
	var ids []string
	var created []time.Time
	for _, ago := range []time.Duration{45, 30, 20} {
		at := now.Add(-ago * time.Minute)
		id, payload := e.event("payment_intent.succeeded", platform, at)
		e.list(platform, payload)
		ids, created = append(ids, id), append(created, at)
	}
	e.failOn(ids[1], true)

	rep, err := e.poller(modeInProcess, poller.Config{}).Run(ctx, poller.Window{})
	require.Error(t, err)
	assert.ErrorContains(t, err, "1 event(s) could not be replayed")
	assert.Equal(t, poller.Counts{Listed: 3, Missing: 3, Replayed: 2, Failed: 1}, rep.Accounts[0].Counts)
	cp, _ := e.checkpoint(platform)
	assert.Equal(t, created[1], cp, "the checkpoint stops at the failed event")
	rec, _ := e.record(ids[1])
	assert.Equal(t, events.StatusFailed, rec.Status)
	assert.Equal(t, 3, rec.Attempts, "tried three times")
	assert.Equal(t, 1, e.effects(ids[2]), "later events are replayed all the same")

	e.failOn(ids[1], false)
	e.setNow(now.Add(time.Minute))
	rep, err = e.poller(modeInProcess, poller.Config{}).Run(ctx, poller.Window{})
	require.NoError(t, err)
	assert.Equal(t, poller.Counts{Listed: 2, AlreadyProcessed: 1, Unprocessed: 1, Replayed: 1}, rep.Accounts[0].Counts)
	cp, _ = e.checkpoint(platform)
	assert.Equal(t, now.Add(time.Minute-settle), cp)
	for _, id := range ids {
		assert.Equal(t, 1, e.effects(id))
	}
}

func TestAccountsLimitsTheRunAndTheLockKeepsRunsApart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for _, acct := range []string{acctA, acctB} {
		_, payload := e.event("payment_intent.succeeded", acct, e.clock().Add(-time.Hour))
		e.list(acct, payload)
		e.deliver(payload)
	}
	rep, err := e.poller(modeInProcess, poller.Config{Accounts: []string{acctB}}).Run(ctx, poller.Window{})
	require.NoError(t, err)
	require.Len(t, rep.Accounts, 1)
	assert.Equal(t, acctB, rep.Accounts[0].Account)
	assert.Equal(t, []string{acctB}, keys(e.api.Stats().ByAccount))

	release, ok, err := ledger.NewCheckpoints(e.app.Pool).TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = e.poller(modeInProcess, poller.Config{}).Run(ctx, poller.Window{})
	assert.ErrorIs(t, err, poller.ErrBusy)
	_, err = e.poller(modeInProcess, poller.Config{DryRun: true}).Run(ctx, poller.Window{})
	assert.NoError(t, err, "a dry run moves no checkpoint and needs no lock")
	release()
	_, err = e.poller(modeInProcess, poller.Config{}).Run(ctx, poller.Window{})
	assert.NoError(t, err)
}

func TestServeRunsThePollerWhenPollEveryIsSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	missing, payload := e.event("payment_intent.succeeded", platform, time.Now().Add(-2*time.Minute))
	e.list(platform, payload)

	vars := e.appVars()
	vars["POLL_EVERY"] = "1s"
	vars["LISTEN_ADDR"] = freeAddr(t)
	vars["ADMIN_LISTEN_ADDR"] = freeAddr(t) // /metrics
	a := e.buildApp(t, vars)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		a.Close()
	})
	url := "http://" + vars["ADMIN_LISTEN_ADDR"]
	require.Eventually(t, func() bool {
		rec, ok := e.record(missing)
		return ok && rec.Status == events.StatusProcessed
	}, 15*time.Second, 50*time.Millisecond)
	rec, _ := e.record(missing)
	assert.Equal(t, stripeevent.SourcePoller, rec.Source)

	var text string
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		text = string(b)
		return strings.Contains(text, "stripe_payments_poller_checkpoint_age_seconds")
	}, 10*time.Second, 50*time.Millisecond)
	for _, want := range []string{
		"\nstripe_payments_poller_events_listed_total ",
		"\nstripe_payments_poller_events_replayed_total 1\n",
		"\nstripe_payments_poller_webhook_gap_total 1\n",
		"\nstripe_payments_poller_events_failed_total 0\n",
		`stripe_payments_http_requests_total{code="200",method="POST",route="/webhooks/stripe"} 1`,
	} {
		assert.Contains(t, text, want)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// freeAddr picks a free loopback port for a program that listens itself.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestAStoppedListingIsNotMistakenForACompleteOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := e.clock()
	for i := range 15 {
		_, payload := e.event("payment_intent.succeeded", platform, now.Add(-time.Duration(i+1)*time.Minute))
		e.list(platform, payload)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Shutdown arrives while the second page is being listed.
	e.api.RateLimit(func(n int) bool {
		if n == 2 {
			cancel()
		}
		return false
	})
	rep, err := e.poller(modeInProcess, poller.Config{PageSize: 5, Lookback: time.Hour}).Run(ctx, poller.Window{})
	require.ErrorIs(t, err, context.Canceled)
	ar := rep.Accounts[0]
	assert.Zero(t, ar.Replayed, "nothing is replayed from a partial listing")
	cp, ok := e.checkpoint(platform)
	require.True(t, ok)
	assert.Equal(t, ar.From, cp, "the checkpoint stays at the window's start")
}
