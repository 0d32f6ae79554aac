package billingtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// The readers and runners the billing and test-clock tests share.

// HistoryOf reads sub's whole history.
func (e *Env) HistoryOf(t testing.TB, sub billing.Subscription) []billing.HistoryEntry {
	t.Helper()
	h, err := e.Store.AllHistory(context.Background(), sub.AccountID, sub.SubscriptionID)
	if err != nil {
		t.Fatalf("history of %s: %v", sub.SubscriptionID, err)
	}
	return h
}

// Period reads sub's period scheduled on date.
func (e *Env) Period(t testing.TB, sub billing.Subscription, date string) billing.Period {
	t.Helper()
	p, err := e.Store.GetPeriod(context.Background(), sub.AccountID, sub.SubscriptionID, dates.MustParse(date))
	if err != nil {
		t.Fatalf("period %s of %s: %v", date, sub.SubscriptionID, err)
	}
	return p
}

// Collect sets the clock to date and runs the collection job for it.
func (e *Env) Collect(t testing.TB, date string) *billing.Report {
	t.Helper()
	return e.run(t, date, e.Service.Collect)
}

// Remind sets the clock to date and runs the reminder job for it.
func (e *Env) Remind(t testing.TB, date string) *billing.Report {
	t.Helper()
	return e.run(t, date, e.Service.Remind)
}

func (e *Env) run(t testing.TB, date string, job func(context.Context, dates.Date) (*billing.Report, error)) *billing.Report {
	t.Helper()
	e.Clock.SetDate(dates.MustParse(date))
	rep, err := job(context.Background(), dates.MustParse(date))
	if err != nil {
		t.Fatalf("job for %s: %v", date, err)
	}
	return rep
}

// Update is UpdateSubscription, waiting out a lease a job left behind
// (ErrLocked) on a loaded machine.
func (e *Env) Update(account, sub string, ch billing.Change) (billing.Subscription, error) {
	for i := 0; ; i++ {
		got, err := e.Service.UpdateSubscription(context.Background(), account, sub, ch)
		if !errors.Is(err, billing.ErrLocked) || i == 50 {
			return got, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Reminders are the reminders sent for subID as "<sent> for <payment date>".
func (e *Env) Reminders(subID string) []string {
	var out []string
	for _, a := range e.Notifier.Actions() {
		if a.Type == billing.ActionReminderDue && *a.SubscriptionID == subID {
			sent, _ := time.Parse(time.RFC3339, a.Created)
			out = append(out, sent.UTC().Format(dates.Layout)+" for "+a.BillingDate)
		}
	}
	return out
}

// Behaviors makes the n-th new PaymentIntent behave as seq[n], the ones
// after the list as Succeed.
func Behaviors(seq ...stripetest.Behavior) func(stripetest.PI) stripetest.Behavior {
	var mu sync.Mutex
	n := 0
	return func(stripetest.PI) stripetest.Behavior {
		mu.Lock()
		defer mu.Unlock()
		n++
		if n <= len(seq) {
			return seq[n-1]
		}
		return stripetest.Succeed
	}
}
