package ops

import (
	"bytes"
	"html/template"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/trigger"
)

// docs/design.md §8 "Collections triggered by the platform": the account
// page lists the account's triggers and what each did, period by period;
// a pending one says so, and a duplicate reference is counted, not listed
// again.
func TestAccountPageShowsPlatformTriggers(t *testing.T) {
	c := &Console{pages: map[string]*template.Template{}}
	require.NoError(t, c.parse())
	at := time.Date(2026, 11, 28, 9, 30, 0, 0, time.UTC)
	d := accountData{Account: "acc-1", Triggers: []trigger.Record{
		{ID: "trg_000000000000000000000001", Trigger: trigger.Trigger{AccountID: "acc-1", Kind: trigger.KindIncome, Reference: "inc-1"},
			Source: trigger.SourceQueue, Status: trigger.StatusDone, Outcome: billing.TriggerCollected, Process: billing.ProcWebhook,
			Attempts: 1, Duplicates: 2, CreatedAt: at, Periods: []trigger.Period{
				{SubscriptionID: "sub-1", BillingDate: "2026-11-10", Outcome: billing.TriggeredPaid, AttemptNo: 3, PaymentIntent: "pi_paid"},
				{SubscriptionID: "sub-2", BillingDate: "2026-11-12", Outcome: billing.TriggeredWaitsForMethod, DeclineCode: "stolen_card"},
			}},
		{ID: "trg_000000000000000000000002", Trigger: trigger.Trigger{AccountID: "acc-1", Kind: trigger.KindBalance, Reference: "bal-1"},
			Source: trigger.SourceAPI, Status: trigger.StatusPending, Process: billing.ProcWebhookBalance, CreatedAt: at},
	}}
	var buf bytes.Buffer
	require.NoError(t, c.pages["account"].ExecuteTemplate(&buf, "layout", view{Title: "Account", Data: d}))
	page := buf.String()
	assert.Contains(t, page, "Platform triggers")
	assert.Contains(t, page, `data-trigger="trg_000000000000000000000001"`)
	assert.Contains(t, page, "inc-1")
	assert.Contains(t, page, "+2 duplicate(s), ignored")
	assert.Contains(t, page, "collected")
	assert.Contains(t, page, "period of 2026-11-10: paid (attempt 3, <code>pi_paid</code>)")
	assert.Contains(t, page, "period of 2026-11-12: waits_for_payment_method")
	assert.Contains(t, page, "WEBHOOK_BALANCE")
	assert.Contains(t, page, `<span class="tag warn">pending</span>`)

	buf.Reset()
	require.NoError(t, c.pages["account"].ExecuteTemplate(&buf, "layout", view{Title: "Account", Data: accountData{Account: "acc-2"}}))
	assert.Contains(t, buf.String(), "No platform triggers for this account.")
}
