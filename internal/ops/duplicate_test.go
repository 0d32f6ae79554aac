package ops

import (
	"bytes"
	"html/template"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// docs/design.md §8: a success refunded automatically because its
// period already had one (or had ended WAIVED or CANCELLED) is shown on the
// subscription page: the period and its history entry carry a "duplicate
// refunded" tag next to the refund's details.
func TestSubscriptionPageShowsDuplicateRefunds(t *testing.T) {
	c := &Console{pages: map[string]*template.Template{}}
	require.NoError(t, c.parse())
	day := dates.MustParse("2024-01-10")
	at := time.Date(2024, 1, 12, 10, 0, 0, 0, time.UTC)
	refunded := billing.Period{AccountID: "acc-1", SubscriptionID: "sub-1", BillingDate: day, Status: billing.Completed,
		Process: billing.ProcInitial, UpdatedEvent: billing.UpdatedEventDuplicateRefunded, Amount: 700, Currency: "usd",
		TransactionID: "pi_b", Error: "second successful charge pi_a (700 usd) refunded: re_1"}
	plain := billing.Period{AccountID: "acc-1", SubscriptionID: "sub-1", BillingDate: day.AddDays(31), Status: billing.Completed,
		UpdatedEvent: "completed", Amount: 700, Currency: "usd"}
	d := subscriptionData{Sub: billing.Subscription{AccountID: "acc-1", SubscriptionID: "sub-1", Status: billing.SubActive},
		Periods: []billing.Period{refunded, plain},
		History: []historyEntry{
			{HistoryEntry: billing.HistoryEntry{BillingDate: day, Status: billing.Completed, UpdatedEvent: "completed", LastRunDate: at, TransactionID: "pi_b"}},
			{HistoryEntry: billing.HistoryEntry{BillingDate: day, Status: billing.Completed, UpdatedEvent: billing.UpdatedEventDuplicateRefunded, LastRunDate: at,
				TransactionID: "pi_b", Error: refunded.Error}},
		}}
	var buf bytes.Buffer
	require.NoError(t, c.pages["subscription"].ExecuteTemplate(&buf, "layout", view{Title: "Subscription", Data: d}))
	page := buf.String()
	assert.Equal(t, 2, bytes.Count(buf.Bytes(), []byte("duplicate refunded")), "the period and its history entry, not the others")
	assert.Contains(t, page, "refunded: re_1")
}
