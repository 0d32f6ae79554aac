package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// CreateInput is createSubscription's request.
type CreateInput struct {
	SubscriptionID string // optional: a client-chosen id makes the create idempotent
	SKU            string
	Email          string
	PaymentDay     int
	BillingWeek    int
	Amount         int64
	Currency       string
	Term           dates.Term
	Customer       string
	PaymentMethod  string
	StripeAccount  string
	StartDate      dates.Date
	Timezone       string
	// TestClock puts the subscription on a test clock (test mode only).
	TestClock string
}

// Validate reports every problem of in at once.
func (in CreateInput) Validate(account string) error {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if !model.ValidID(account) {
		add("account_id: 1-128 characters without '#', '/' or spaces")
	}
	if in.SubscriptionID != "" && !model.ValidID(in.SubscriptionID) {
		add("subscription_id: 1-128 characters without '#', '/' or spaces")
	}
	if !model.ValidID(in.SKU) {
		add("sku: required, 1-128 characters without '#', '/' or spaces")
	}
	if a, err := mail.ParseAddress(in.Email); err != nil || a.Address != in.Email || len(in.Email) > 254 {
		add("email: a plain address is required")
	}
	if err := (dates.Rule{Day: in.PaymentDay, Week: in.BillingWeek, Term: in.Term}).Validate(); err != nil {
		add("%v", err)
	}
	if in.BillingWeek != 0 && in.PaymentDay != 0 {
		add("payment_day and billing_week are exclusive")
	}
	if in.Amount < 1 || in.Amount > 99_999_999 {
		add("amount: 1 to 99999999 minor units")
	}
	if !model.SupportedCurrency(in.Currency) {
		add("currency: one of Stripe's supported currencies, as a lowercase ISO 4217 code (usd, eur, ...)")
	}
	if !stripeid.Valid(in.Customer, "cus_") {
		add("customer: a Stripe customer id (cus_...)")
	}
	if !stripeid.Valid(in.PaymentMethod, "pm_") {
		add("payment_method: a Stripe payment method id (pm_...)")
	}
	if in.StripeAccount != "" && !stripeid.Valid(in.StripeAccount, "acct_") {
		add("stripe_account: a connected account id (acct_...), or absent to charge on the platform's own account")
	}
	if in.Timezone != "" {
		if _, err := time.LoadLocation(in.Timezone); err != nil || in.Timezone == "Local" {
			add("timezone: an IANA time zone name")
		}
	}
	if in.TestClock != "" && !stripeid.Valid(in.TestClock, "clock_") {
		add("test_clock: a test clock id (clock_...)")
	}
	if len(errs) > 0 {
		return apperr.Invalid("%s", strings.Join(errs, "; "))
	}
	return nil
}

// MaxStartMonths bounds start_date: docs/design.md §8 names no bound, but a date
// years ahead is a typo (9999-12-31 made a first period in year 10000,
// which no date field can hold), not a plan.
const MaxStartMonths = 24

// MaxStartDate is the latest start_date a subscription created on today
// (its test clock's date when it has one) may have.
func MaxStartDate(today dates.Date) dates.Date { return dates.AddMonthsClamped(today, MaxStartMonths) }

// CreateSubscription creates a subscription and its first SCHEDULED period
// (createSubscription). The first payment is on the first payment day after
// today (or on/after start_date when later): today's job may have run.
func (lc *Lifecycle) CreateSubscription(ctx context.Context, account string, in CreateInput) (model.Subscription, error) {
	// No stripe_account: the platform charges its own customer on its own
	// account, with no Stripe-Account header (docs/design.md §4), whatever account_id.
	if err := in.Validate(account); err != nil {
		return model.Subscription{}, err
	}
	if in.TestClock != "" {
		if lc.Cfg.Livemode {
			return model.Subscription{}, model.ErrLivemode
		}
		if _, err := lc.Store.GetClock(ctx, in.TestClock); errors.Is(err, apperr.ErrNotFound) {
			return model.Subscription{}, apperr.Invalid("test_clock: no test clock %s", in.TestClock)
		} else if err != nil {
			return model.Subscription{}, err
		}
	}
	lc, err := lc.forSub(ctx, model.Subscription{TestClock: in.TestClock})
	if err != nil {
		return model.Subscription{}, err
	}
	now := lc.Now()
	sub := model.Subscription{
		AccountID: account, SubscriptionID: in.SubscriptionID, SKU: in.SKU, Email: in.Email,
		PaymentDay: in.PaymentDay, BillingWeek: in.BillingWeek, Amount: in.Amount, Currency: in.Currency,
		Term: in.Term, Timezone: in.Timezone, Status: model.SubActive, CreatedAt: now, TestClock: in.TestClock,
		PaymentDetails: model.PaymentDetails{Customer: in.Customer, PaymentMethod: in.PaymentMethod, StripeAccount: in.StripeAccount},
	}
	if sub.SubscriptionID == "" {
		sub.SubscriptionID = uuid.NewString()
	}
	today := lc.Today(sub)
	if limit := MaxStartDate(today); in.StartDate.After(limit) {
		return model.Subscription{}, apperr.Invalid("start_date: at most %d months after today (%s), so on or before %s", MaxStartMonths, today, limit)
	}
	// Subscriptions created before ids were claimed have no claim: the
	// read finds them (any SKU).
	if existing, err := lc.Store.GetSubscription(ctx, account, sub.SubscriptionID); err == nil {
		if retried(existing, sub) {
			return existing, nil // a retried create
		}
		return model.Subscription{}, fmt.Errorf("subscription %s: %w", sub.SubscriptionID, model.ErrDuplicate)
	} else if !errors.Is(err, apperr.ErrNotFound) {
		return model.Subscription{}, err
	}
	sub.StartDate = in.StartDate
	first := sub.Rule().First(dates.Max(today.AddDays(1), in.StartDate))
	p := model.NewPeriod(sub, first, model.Scheduled, model.ProcInitial, "created", now)
	lc.Sched.Point(&sub, p, today, true)

	// Registered before the subscription exists, so the poller's account
	// list always covers every account the table charges on.
	if err := lc.Store.RegisterChargedAccounts(ctx, sub.PaymentDetails.StripeAccount); err != nil {
		return model.Subscription{}, err
	}
	tx := model.NewTx("create:"+sub.SubscriptionID, now)
	// The create takes no lock: two creates of one id race to this
	// transaction, and the id's claim lets exactly one of them write (the
	// subscription's own key names the SKU, so it alone would not).
	tx.ClaimSubscriptionID(sub)
	tx.PutSubscription(&sub)
	tx.PutPeriod(&p, false)
	if sub.TestClock != "" {
		tx.PutClockMember(sub) // DELETE of the clock cancels it
	}
	if err := lc.Store.Commit(ctx, tx); err != nil {
		if errors.Is(err, model.ErrConflict) {
			return lc.lostCreate(ctx, sub)
		}
		return model.Subscription{}, fmt.Errorf("create subscription: %w", err)
	}
	return sub, nil
}

// retried reports whether want is a retry of the create that made
// existing (the same request), which answers with existing.
func retried(existing, want model.Subscription) bool {
	return existing.SKU == want.SKU && existing.Amount == want.Amount && existing.PaymentDetails == want.PaymentDetails &&
		existing.TestClock == want.TestClock
}

// lostCreate answers a create whose transaction lost to a concurrent
// change of the same id: the winner's subscription when it is the same
// request (a retry racing itself), else ErrDuplicate (409), or ErrConflict
// when the winner is not readable yet (retry).
func (lc *Lifecycle) lostCreate(ctx context.Context, sub model.Subscription) (model.Subscription, error) {
	existing, err := lc.Store.GetSubscription(ctx, sub.AccountID, sub.SubscriptionID)
	switch {
	case errors.Is(err, apperr.ErrNotFound):
		return model.Subscription{}, fmt.Errorf("subscription %s is being created concurrently: %w", sub.SubscriptionID, model.ErrConflict)
	case err != nil:
		return model.Subscription{}, err
	case retried(existing, sub):
		return existing, nil
	}
	return model.Subscription{}, fmt.Errorf("subscription %s: %w", sub.SubscriptionID, model.ErrDuplicate)
}
