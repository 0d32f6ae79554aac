package ops

import (
	"bytes"
	"html/template"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// Plan change: the subscription page tags a pending downgrade
// (docs/design.md §4 pending_downgrade; none while CANCELLED) and names each
// period's plan, so an operator sees which periods the change reached.
func TestConsoleShowsPendingDowngradeAndEachPeriodsPlan(t *testing.T) {
	c := &Console{pages: map[string]*template.Template{}}
	require.NoError(t, c.parse())
	day := dates.MustParse("2024-01-10")
	periods := []billing.Period{
		{AccountID: "acc-1", SubscriptionID: "sub-1", SKU: "gold-plan", BillingDate: day, Status: billing.Completed, Amount: 1999, Currency: "usd"},
		{AccountID: "acc-1", SubscriptionID: "sub-1", SKU: "silver-plan", BillingDate: day.AddDays(31), Status: billing.Scheduled, Amount: 999, Currency: "usd"},
	}
	tests := []struct {
		name    string
		status  billing.SubStatus
		pending bool
		want    bool
	}{
		{name: "pending", status: billing.SubActive, pending: true, want: true},
		{name: "applied", status: billing.SubActive, pending: false, want: false},
		{name: "cancelled", status: billing.SubCancelled, pending: true, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := subscriptionData{Sub: billing.Subscription{AccountID: "acc-1", SubscriptionID: "sub-1", SKU: "silver-plan",
				Status: tc.status, PendingDowngrade: tc.pending}, Periods: periods}
			var buf bytes.Buffer
			require.NoError(t, c.pages["subscription"].ExecuteTemplate(&buf, "layout", view{Title: "Subscription", Data: d}))
			page := buf.String()
			assert.Equal(t, tc.want, strings.Contains(page, `id="pending-downgrade">pending downgrade</span>`))
			assert.Contains(t, page, `<td data-label="SKU">gold-plan</td>`, "the charged period keeps its plan")
			assert.Contains(t, page, `<td data-label="SKU">silver-plan</td>`)
		})
	}
}
