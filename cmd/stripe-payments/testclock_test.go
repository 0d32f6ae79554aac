package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

const (
	clockToken   = "clock-e2e-token"
	clockSecret  = "whsec_fake_clock_e2e"
	clockActions = "clock-e2e-actions-secret"
)

// clockSink is ACTIONS_URL: it keeps the billing actions delivered, once
// per action id (first, in order).
type clockSink = actionReceiver[map[string]any]

func newClockSink(t *testing.T) *clockSink {
	str := func(key string) func(map[string]any) string {
		return func(a map[string]any) string { v, _ := a[key].(string); return v }
	}
	return newActionReceiver(t, clockActions, str("id"), str("type"))
}

// reminders are "<sent> for <billing date>" of subscription sub.
func reminders(s *clockSink, sub string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, a := range s.first {
		if a["type"] == billing.ActionReminderDue && a["subscription_id"] == sub {
			out = append(out, a["created"].(string)[:10]+" for "+a["billing_date"].(string))
		}
	}
	sort.Strings(out)
	return out
}

type clockE2E struct {
	t      *testing.T
	base   string // public listener: the webhook
	admin  string // admin listener: the internal API
	client *http.Client
}

func (c clockE2E) api(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req, err := http.NewRequest(method, c.admin+path, bytes.NewReader(raw))
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+clockToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(answer) > 0 {
		require.NoError(c.t, json.Unmarshal(answer, &out), string(answer))
	}
	return resp.StatusCode, out
}

// advance advances the clock and waits until it is ready (200, or 202 then
// GET until ready).
func (c clockE2E) advance(id, to string) map[string]any {
	c.t.Helper()
	status, clock := c.api(http.MethodPost, "/internal/v1/test_clocks/"+id+"/advance", map[string]any{"frozen_time": to})
	require.Contains(c.t, []int{http.StatusOK, http.StatusAccepted}, status, "%v", clock)
	require.Eventually(c.t, func() bool {
		_, clock = c.api(http.MethodGet, "/internal/v1/test_clocks/"+id, nil)
		return clock["status"] != "advancing"
	}, 10*time.Minute, 100*time.Millisecond)
	require.Equal(c.t, "ready", clock["status"], "%v", clock)
	require.Equal(c.t, to, clock["frozen_time"])
	return clock
}

// history is the subscription's history, oldest first.
func (c clockE2E) history(sub string) []map[string]any {
	c.t.Helper()
	var all []map[string]any
	cursor := ""
	for {
		path := "/internal/v1/accounts/acc-clock/subscriptions/" + sub + "/history?limit=1000"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		status, page := c.api(http.MethodGet, path, nil)
		require.Equal(c.t, http.StatusOK, status, "%v", page)
		for _, e := range page["data"].([]any) {
			all = append(all, e.(map[string]any))
		}
		if cursor, _ = page["next_cursor"].(string); cursor == "" {
			return all
		}
	}
}

// onDates is "<day of last_run_date> for <billing date>" of the history
// entries of sub with status.
func (c clockE2E) onDates(sub, status string) []string {
	var out []string
	for _, e := range c.history(sub) {
		if e["billing_status"] == status {
			out = append(out, e["last_run_date"].(string)[:10]+" for "+e["billing_date"].(string))
		}
	}
	sort.Strings(out)
	return out
}

// TestTestClockEndToEnd drives the real binary through its HTTP API as a
// QA engineer would: a clock at 2027-01-01, a day-31 card, a
// day-15 declined card and a day-10 bank debit settled later by a signed
// webhook (on the clock's settlement day: the advance waits for it),
// advanced month by month to 2028-03-01; a second clock advanced at the
// same time. Expectations come from docs/design.md §8 (payment days clamp
// to the month's end, reminders BILLING_REMINDER_DAYS=7 before, retries on
// days 1, 3, 5, 7 after a decline, STALE 30 days after the due date).
func TestTestClockEndToEnd(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	bill := stripetest.New(t, stripetest.Options{})
	// Stripe's test payment methods, as the local Stripe of make run has them.
	bill.Decide = func(p stripetest.PI) stripetest.Behavior {
		return stripetest.TestPaymentMethod(p.PaymentMethod).Behavior
	}
	sink := newClockSink(t)
	vars := stackVars(t, bill, map[string]string{
		"STRIPE_WEBHOOK_SECRET": clockSecret, "STRIPE_API_KEY": "sk_test_fake_clock_e2e",
		"STRIPE_PLATFORM_ACCOUNT": "acct_1ClockPlatform", "INTERNAL_API_TOKEN": clockToken,
		"ACTIONS_URL": sink.URL, "ACTIONS_SECRET": clockActions, "LOG_LEVEL": "warn",
		// The real-time jobs run all along: they must never touch the clocks.
		"BILLING_EVERY": "1s",
	})
	migrateStack(t, bin, vars)
	addr := freeAddr(t)
	srv := newServer(t, bin, with(vars, addr), addr)
	srv.start()
	c := clockE2E{t: t, base: srv.url(), admin: srv.adminURL(), client: &http.Client{Timeout: time.Minute}}

	newClock := func(name string) string {
		status, clock := c.api(http.MethodPost, "/internal/v1/test_clocks", map[string]any{"frozen_time": "2027-01-01T00:00:00Z", "name": name})
		require.Equal(t, http.StatusCreated, status, "%v", clock)
		return clock["id"].(string)
	}
	create := func(clock, sku string, day int, pm string) string {
		status, sub := c.api(http.MethodPost, "/internal/v1/accounts/acc-clock/subscriptions", map[string]any{
			"sku": sku, "email": "qa@example.com", "payment_day": day, "amount": 2500, "currency": "usd",
			"customer": "cus_clock", "payment_method": pm, "test_clock": clock})
		require.Equal(t, http.StatusCreated, status, "%v", sub)
		return sub["subscription_id"].(string)
	}
	clock, other := newClock("e2e"), newClock("other")
	card := create(clock, "card", 31, "pm_card_visa")
	declined := create(clock, "declined", 15, "pm_card_chargeDeclined")
	ach := create(clock, "ach", 10, "pm_usBankAccount")
	otherSub := create(other, "other", 31, "pm_card_visa")

	// Stripe settles each bank debit on its own and sends the signed
	// webhook during the advances: an advance waits on the debit's
	// settlement day until the service recorded it (TEST_CLOCK_SETTLE_WAIT),
	// so the settlement is dated on that day of the clock. This Stripe
	// settles a debit once the clock has reached that day (as a Stripe
	// test clock would), not after a wall-clock delay: on a loaded machine
	// the clock can take longer than any fixed delay to get there, and the
	// debit would settle days early.
	settleOnce := func() {
		status, got := c.api(http.MethodGet, "/internal/v1/test_clocks/"+clock, nil)
		if status != http.StatusOK {
			return
		}
		reached, _ := got["advanced_to"].(string)
		for _, pi := range bill.PIs() {
			if pi.Status != "processing" || len(reached) < 10 {
				continue
			}
			due := fourBusinessDaysAfter(pi.Metadata[billing.MetaDate])
			if due == "" || reached[:10] < due {
				continue
			}
			p, err := bill.Settle(pi.ID, true)
			if !assert.NoError(t, err) {
				return
			}
			payload := bill.Event(p, "payment_intent.succeeded", time.Now())
			req, _ := http.NewRequest(http.MethodPost, c.base+"/webhooks/stripe", bytes.NewReader(payload))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Stripe-Signature", stripetest.Sign(payload, clockSecret, time.Now()))
			resp, err := c.client.Do(req)
			if !assert.NoError(t, err) {
				return
			}
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
		}
	}
	stopSettling := make(chan struct{})
	var settling sync.WaitGroup
	settling.Add(1)
	go func() {
		defer settling.Done()
		for {
			select {
			case <-stopSettling:
				return
			case <-time.After(50 * time.Millisecond):
				settleOnce()
			}
		}
	}()

	// The other clock advances while the first one does.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.advance(other, "2027-06-01T00:00:00Z")
	}()
	for _, to := range []string{"2027-02-01", "2027-03-01", "2027-04-01", "2027-05-01", "2027-06-01", "2027-07-01",
		"2027-08-01", "2027-09-01", "2027-10-01", "2027-11-01", "2027-12-01", "2028-01-01", "2028-02-01", "2028-03-01"} {
		began := time.Now()
		c.advance(clock, to+"T00:00:00Z")
		t.Logf("advanced to %s in %s", to, time.Since(began).Round(time.Millisecond))
	}
	wg.Wait()
	close(stopSettling)
	settling.Wait()

	monthEnds := []string{"2027-01-31", "2027-02-28", "2027-03-31", "2027-04-30", "2027-05-31", "2027-06-30", "2027-07-31",
		"2027-08-31", "2027-09-30", "2027-10-31", "2027-11-30", "2027-12-31", "2028-01-31", "2028-02-29"}
	each := func(ds []string, f func(string) string) []string {
		out := make([]string, len(ds))
		for i, d := range ds {
			out[i] = f(d)
		}
		return out
	}
	onItsDay := func(d string) string { return d + " for " + d }
	day := func(d string, n int) string {
		t, _ := time.Parse("2006-01-02", d)
		return t.AddDate(0, 0, n).Format("2006-01-02")
	}
	var tenths []string
	for m := time.Date(2027, 1, 10, 0, 0, 0, 0, time.UTC); m.Before(time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)); m = m.AddDate(0, 1, 0) {
		tenths = append(tenths, m.Format("2006-01-02"))
	}
	// Reminders leave through the outbox after the advance that made them:
	// the last ones may still be on their way when the advance returns.
	require.Eventually(t, func() bool {
		return len(reminders(sink, card)) >= len(monthEnds) && len(reminders(sink, ach)) >= len(tenths)
	}, 30*time.Second, 100*time.Millisecond, "the outbox delivers the last month's reminders")
	// The day-31 card: charged on each month's last day, announced 7 days before.
	assert.Equal(t, each(monthEnds, onItsDay), c.onDates(card, "COMPLETED"))
	assert.Equal(t, each(monthEnds, func(d string) string { return day(d, -7) + " for " + d }), reminders(sink, card))

	// The bank debit: ACHSENT on the 10th, COMPLETED by its webhook on
	// the clock's day it settles, 4 business days later (docs/billing.md).
	assert.Equal(t, each(tenths, onItsDay), c.onDates(ach, "ACHSENT"))
	fourBusinessDaysLater := func(d string) string { return fourBusinessDaysAfter(d) + " for " + d }
	assert.Equal(t, each(tenths, fourBusinessDaysLater), c.onDates(ach, "COMPLETED"))
	assert.Equal(t, each(tenths, func(d string) string { return day(d, -7) + " for " + d }), reminders(sink, ach))

	// The declined card: attempts on the due date and retries on days 1,
	// 3, 5 and 7 after it, each an ERROR; STALE 30 days after the due date.
	var fifteenths, wantErrors, wantStale []string
	for m := time.Date(2027, 1, 15, 0, 0, 0, 0, time.UTC); m.Before(time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)); m = m.AddDate(0, 1, 0) {
		d := m.Format("2006-01-02")
		fifteenths = append(fifteenths, d)
		for _, n := range []int{0, 1, 3, 5, 7} {
			wantErrors = append(wantErrors, day(d, n)+" for "+d)
		}
		if stale := day(d, 30); stale <= "2028-03-01" {
			wantStale = append(wantStale, stale+" for "+d)
		}
	}
	sort.Strings(wantErrors)
	assert.Equal(t, wantErrors, c.onDates(declined, "ERROR"))
	assert.Equal(t, wantStale, c.onDates(declined, "STALE"))
	assert.Empty(t, c.onDates(declined, "COMPLETED"))

	// Stripe saw exactly those attempts: one idempotency key per attempt,
	// so one per period for the card and the bank debit.
	keys := map[string]int{}
	perSub := map[string]int{}
	for _, pi := range bill.PIs() {
		keys[pi.IdempotencyKey]++
		perSub[pi.Metadata[billing.MetaSubscription]]++
	}
	for k, n := range keys {
		assert.Equal(t, 1, n, "idempotency key %s used by %d PaymentIntents", k, n)
	}
	assert.Equal(t, len(monthEnds), perSub[card])
	assert.Equal(t, len(tenths), perSub[ach])
	assert.Equal(t, len(wantErrors), perSub[declined])
	assert.Equal(t, 5, perSub[otherSub], "the other clock: Jan 31 … May 31 2027, nothing of the first clock's")

	// Receipts: one per successful charge, processed on the clock's date.
	var receipts, achReceipts []string
	cursor := ""
	for {
		path := "/internal/v1/accounts/acc-clock/receipts?limit=1000"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		status, page := c.api(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, status)
		for _, r := range page["data"].([]any) {
			r := r.(map[string]any)
			switch r["subscription_id"] {
			case card:
				receipts = append(receipts, r["processed_date"].(string)+" for "+r["billing_date"].(string))
			case ach:
				achReceipts = append(achReceipts, r["processed_date"].(string)+" for "+r["billing_date"].(string))
			}
		}
		if cursor, _ = page["next_cursor"].(string); cursor == "" {
			break
		}
	}
	sort.Strings(receipts)
	assert.Equal(t, each(monthEnds, onItsDay), receipts)
	sort.Strings(achReceipts)
	assert.Equal(t, each(tenths, fourBusinessDaysLater), achReceipts, "a bank debit's receipt is dated on the clock's day it settled")

	// An advance over days already passed does nothing.
	before := len(bill.PIs())
	status, body := c.api(http.MethodPost, "/internal/v1/test_clocks/"+clock+"/advance", map[string]any{"frozen_time": "2028-02-01T00:00:00Z"})
	assert.Equal(t, http.StatusBadRequest, status, "%v", body)
	status, _ = c.api(http.MethodPost, "/internal/v1/test_clocks/"+clock+"/advance", map[string]any{"frozen_time": "2028-03-01T00:00:00Z"})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Len(t, bill.PIs(), before)

	// Deleting the clock cancels its subscriptions and says why.
	status, _ = c.api(http.MethodDelete, "/internal/v1/test_clocks/"+clock, nil)
	require.Equal(t, http.StatusOK, status)
	for _, sub := range []string{card, declined, ach} {
		status, got := c.api(http.MethodGet, "/internal/v1/accounts/acc-clock/subscriptions/"+sub, nil)
		require.Equal(t, http.StatusOK, status)
		assert.Equal(t, "CANCELLED", got["status"], sub)
	}
	sink.mu.Lock()
	assert.Empty(t, sink.bad, "every action delivery was signed")
	sink.mu.Unlock()
	require.NoError(t, srv.stop(30*time.Second), fmt.Sprintf("serve exited uncleanly\n%s", srv.allLogs()))
}

// fourBusinessDaysAfter is the day a bank debit made on d settles
// (docs/billing.md, Test clocks): four weekdays later ("" for a bad date).
func fourBusinessDaysAfter(d string) string {
	t, err := time.Parse("2006-01-02", d)
	if err != nil {
		return ""
	}
	for n := 0; n < 4; {
		t = t.AddDate(0, 0, 1)
		if t.Weekday() != time.Saturday && t.Weekday() != time.Sunday {
			n++
		}
	}
	return t.Format("2006-01-02")
}
