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

// The subscription page tags a period declined with a code
// retrying cannot fix "not retried: <code>" (docs/design.md §8), and the account
// page shows how each receipt was paid (docs/design.md §4 payment_method_type and
// payment_method_last4).
func TestConsoleShowsHardDeclinesAndHowReceiptsWerePaid(t *testing.T) {
	c := &Console{pages: map[string]*template.Template{}}
	require.NoError(t, c.parse())
	day := dates.MustParse("2024-01-10")
	hard := billing.Period{AccountID: "acc-1", SubscriptionID: "sub-1", BillingDate: day, Status: billing.Error,
		DeclineCode: "lost_card", NotRetried: true, Error: "not retried: lost_card (card_declined: Your card was declined.)",
		Amount: 700, Currency: "usd"}
	soft := billing.Period{AccountID: "acc-1", SubscriptionID: "sub-1", BillingDate: day.AddDays(31), Status: billing.Error,
		DeclineCode: "insufficient_funds", Error: "card_declined: Your card has insufficient funds.", Amount: 700, Currency: "usd"}
	d := subscriptionData{Sub: billing.Subscription{AccountID: "acc-1", SubscriptionID: "sub-1", Status: billing.SubActive},
		Periods: []billing.Period{hard, soft}}
	var buf bytes.Buffer
	require.NoError(t, c.pages["subscription"].ExecuteTemplate(&buf, "layout", view{Title: "Subscription", Data: d}))
	assert.Equal(t, 1, strings.Count(buf.String(), `<span class="tag bad">not retried: lost_card</span>`), "the hard decline only")

	a := accountData{Account: "acc-1", Receipts: []billing.Receipt{
		{AccountID: "acc-1", SubscriptionID: "sub-1", SKU: "gold", ProcessedDate: day, BillingDate: day, Amount: 700, Currency: "usd",
			PaymentIntent: "pi_card", PaymentMethodType: "card", PaymentMethodLast4: "4242"},
		{AccountID: "acc-1", SubscriptionID: "sub-2", SKU: "gold", ProcessedDate: day, BillingDate: day, Amount: 700, Currency: "usd",
			PaymentIntent: "pi_bank", PaymentMethodType: "us_bank_account", PaymentMethodLast4: "6789"},
	}}
	buf.Reset()
	require.NoError(t, c.pages["account"].ExecuteTemplate(&buf, "layout", view{Title: "Account", Data: a}))
	assert.Contains(t, buf.String(), "card ····4242")
	assert.Contains(t, buf.String(), "us_bank_account ····6789")
}
