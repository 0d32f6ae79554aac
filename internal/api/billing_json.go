package api

import (
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// Subscription is the JSON shape of a subscription (docs/design.md §4, Contract),
// plus how it is charged and paused. Dates are YYYY-MM-DD; a date that
// never happened is null.
type Subscription struct {
	AccountID        string  `json:"account_id"`
	SubscriptionID   string  `json:"subscription_id"`
	SKU              string  `json:"sku"`
	Email            string  `json:"email"`
	PaymentDay       int     `json:"payment_day"`
	Amount           int64   `json:"amount"`
	Currency         string  `json:"currency"`
	Term             string  `json:"term"`
	Status           string  `json:"status"`
	NextPaymentDate  *string `json:"next_payment_date"`
	NextReminderDate *string `json:"next_reminder_date"`
	LastPaymentDate  *string `json:"last_payment_date"`
	LastReminderDate *string `json:"last_reminder_date"`
	BillingWeek      int     `json:"billing_week,omitempty"`
	Timezone         string  `json:"timezone,omitempty"`
	StripeAccount    string  `json:"stripe_account"`
	Customer         string  `json:"customer"`
	PaymentMethod    string  `json:"payment_method"`
	// PausedUntil is the scheduled date of the last PAUSED period of a
	// pause; next_payment_date is the first charge after it.
	PausedUntil *string `json:"paused_until,omitempty"`
	// TestClock: the test clock the subscription lives on.
	TestClock string `json:"test_clock,omitempty"`
	// PendingDowngrade: a plan change to a lower amount waits for its
	// first period to be charged (docs/design.md §4; false while CANCELLED).
	PendingDowngrade bool `json:"pending_downgrade"`
}

// Receipt is the JSON shape of a receipt (docs/design.md §4, Contract), plus the
// billing date it paid and when it expires.
type Receipt struct {
	AccountID       string `json:"account_id"`
	SubscriptionID  string `json:"subscription_id"`
	SKU             string `json:"sku"`
	ProcessedDate   string `json:"processed_date"`
	ProcessedAmount int64  `json:"processed_amount"`
	Currency        string `json:"currency"`
	PaymentIntent   string `json:"payment_intent"`
	// PaymentMethodType (card, us_bank_account, …) and PaymentMethodLast4:
	// from the charge Stripe made; null when it did not say.
	PaymentMethodType  *string `json:"payment_method_type"`
	PaymentMethodLast4 *string `json:"payment_method_last4"`
	BillingDate        string  `json:"billing_date"`
	ExpiresAt          string  `json:"expires_at"`
}

// HistoryEntry is the JSON shape of a history entry (docs/design.md §4, Contract),
// plus what an operator needs to read it.
type HistoryEntry struct {
	SubscriptionID string  `json:"subscription_id"`
	BillingDate    string  `json:"billing_date"`
	BillingStatus  string  `json:"billing_status"`
	Process        string  `json:"process"`
	LastRunDate    string  `json:"last_run_date"`
	TransactionID  *string `json:"transaction_id"`
	Error          *string `json:"error"`
	UpdatedEvent   string  `json:"updated_event,omitempty"`
	Amount         int64   `json:"amount"`
	Attempts       int     `json:"attempts"`
}

func optDate(d dates.Date) *string {
	if d.IsZero() {
		return nil
	}
	s := d.String()
	return &s
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// SubscriptionJSON renders a subscription.
func SubscriptionJSON(s billing.Subscription) Subscription {
	out := Subscription{
		AccountID: s.AccountID, SubscriptionID: s.SubscriptionID, SKU: s.SKU, Email: s.Email,
		PaymentDay: s.PaymentDay, Amount: s.Amount, Currency: s.Currency, Term: string(s.Term), Status: string(s.Status),
		NextPaymentDate: optDate(s.NextPaymentDate), NextReminderDate: optDate(s.NextReminderDate),
		LastPaymentDate: optDate(s.LastPaymentDate), LastReminderDate: optDate(s.LastReminderDate),
		BillingWeek: s.BillingWeek, Timezone: s.Timezone, StripeAccount: s.PaymentDetails.StripeAccount,
		Customer: s.PaymentDetails.Customer, PaymentMethod: s.PaymentDetails.PaymentMethod,
		PausedUntil: optDate(s.PausedUntil), TestClock: s.TestClock,
		PendingDowngrade: s.PendingDowngrade && s.Status != billing.SubCancelled,
	}
	if s.Status == billing.SubCancelled {
		out.NextPaymentDate, out.NextReminderDate = nil, nil
	}
	return out
}

// ReceiptJSON renders a receipt.
func ReceiptJSON(r billing.Receipt) Receipt {
	return Receipt{
		AccountID: r.AccountID, SubscriptionID: r.SubscriptionID, SKU: r.SKU, ProcessedDate: r.ProcessedDate.String(),
		ProcessedAmount: r.Amount, Currency: r.Currency, PaymentIntent: r.PaymentIntent,
		PaymentMethodType: optString(r.PaymentMethodType), PaymentMethodLast4: optString(r.PaymentMethodLast4),
		BillingDate: r.BillingDate.String(), ExpiresAt: r.ExpiresAt.UTC().Format(time.RFC3339),
	}
}

// HistoryJSON renders a history entry.
func HistoryJSON(e billing.HistoryEntry) HistoryEntry {
	return HistoryEntry{
		SubscriptionID: e.SubscriptionID, BillingDate: e.BillingDate.String(), BillingStatus: string(e.Status),
		Process: string(e.Process), LastRunDate: e.LastRunDate.UTC().Format(time.RFC3339Nano),
		TransactionID: optString(e.TransactionID), Error: optString(e.Error), UpdatedEvent: e.UpdatedEvent,
		Amount: e.Amount, Attempts: e.Attempts,
	}
}
