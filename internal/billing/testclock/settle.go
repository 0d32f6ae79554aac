package testclock

import (
	"context"
	"fmt"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// Bank debits on a clock settle in the clock's time.
//
// A bank debit (ACH Direct Debit) is submitted on its day and Stripe says
// how it ended only later, in Stripe's (real) time: up to 4 business days
// in live mode, seconds with the local Stripe. An advance runs a day of
// clock time in milliseconds, so left alone the clock would be weeks past
// the debit when Stripe's webhook arrives, and the settlement (history,
// receipt, retries) would be dated there: a January debit paid in March.
// So on the clock day a debit it knows of would settle, the advance stands
// still, for at most SettleWait of wall time, until that debit's outcome
// is recorded by the webhook feed. The clock's reached time is that day
// meanwhile, and the feed takes a clock subscription's today from it.
//
// Nothing is made up: only Stripe's webhook (through the feed) ends a
// debit. When it does not come in time the day's run says so
// (DebitsUnsettled) and the advance goes on; the webhook then applies on
// the clock's date of whenever it comes, as it always did. A webhook that
// comes before the settlement day applies on the day it comes.

// SettleBusinessDays is how many business days (Monday to Friday; bank
// holidays are not modelled) after its submission a debit settles in the
// clock's time: Stripe documents up to 4 for ACH Direct Debit.
const SettleBusinessDays = 4

// DefaultSettleWait is SettleWait's default: the local Stripe's bank debits
// settle after 20 s (LOCAL_STRIPE_ACH_DELAY), plus the webhook's way
// through the feed, with room for a loaded machine.
const DefaultSettleWait = 30 * time.Second

// settleDate is the day a debit submitted on day settles.
func settleDate(day dates.Date) dates.Date {
	for n := 0; n < SettleBusinessDays; {
		day = day.AddDays(1)
		if wd := day.Weekday(); wd != time.Saturday && wd != time.Sunday {
			n++
		}
	}
	return day
}

// debit is a bank debit of a clock's subscription still processing.
type debit struct {
	account, sub string
	period       dates.Date
	pi           string
	loc          *time.Location // the subscription's: its days are in it
	settles      dates.Date
}

// debits tracks, during one advance, the clock's debits still to wait for.
type debits struct {
	clock   string
	from    time.Time // the clock's time when the advance began
	pending map[string]debit
	awaited map[string]bool // by PaymentIntent: each is waited for once
}

func newDebits(clock string, from time.Time) *debits {
	return &debits{clock: clock, from: from, pending: map[string]debit{}, awaited: map[string]bool{}}
}

// refresh reads the clock's debits still processing. One whose settlement
// day came before this advance began had its day already.
func (s *Service) refreshDebits(ctx context.Context, d *debits) error {
	members, err := s.store.ClockMembers(ctx, d.clock)
	if err != nil {
		return fmt.Errorf("bank debits of the clock: %w", err)
	}
	for _, m := range members {
		sub, err := s.store.GetSubscription(ctx, m.AccountID, m.SubscriptionID)
		if err != nil {
			return fmt.Errorf("bank debits of %s: %w", m.SubscriptionID, err)
		}
		periods, err := s.store.ListPeriods(ctx, m.AccountID, m.SubscriptionID)
		if err != nil {
			return fmt.Errorf("bank debits of %s: %w", m.SubscriptionID, err)
		}
		loc := sub.Location()
		for _, p := range periods {
			if p.Status != model.ACHSent || p.TransactionID == "" || d.awaited[p.TransactionID] {
				continue
			}
			// The period was last written when the debit was submitted
			// (ACHSENT), at the clock's time.
			settles := settleDate(dates.In(p.LastRunDate, loc))
			if !settles.After(dates.In(d.from, loc)) {
				continue
			}
			d.pending[p.TransactionID] = debit{account: m.AccountID, sub: m.SubscriptionID, period: p.BillingDate,
				pi: p.TransactionID, loc: loc, settles: settles}
		}
	}
	return nil
}

// due takes out of d the debits whose settlement day has come at clock
// time at (none when d is nil: not waiting).
func (d *debits) due(at time.Time) []debit {
	if d == nil {
		return nil
	}
	var out []debit
	for pi, x := range d.pending {
		if !x.settles.After(dates.In(at, x.loc)) {
			out = append(out, x)
			delete(d.pending, pi)
			d.awaited[pi] = true
		}
	}
	return out
}

// awaitSettlements waits, at most SettleWait of wall time, until each of
// due has an outcome recorded (its period is no longer ACHSENT on that
// PaymentIntent). It says how many did and how many did not.
func (s *Service) awaitSettlements(ctx context.Context, due []debit) (settled, unsettled int) {
	deadline := time.NewTimer(s.cfg.SettleWait)
	defer deadline.Stop()
	for {
		left := due[:0]
		for _, x := range due {
			p, err := s.store.GetPeriod(ctx, x.account, x.sub, x.period)
			switch {
			case err != nil:
				if ctx.Err() == nil {
					s.log.Warn("test clock: could not read a bank debit's period", "subscription_id", x.sub,
						"billing_date", x.period.String(), "error", err)
				}
				left = append(left, x)
			case p.Status == model.ACHSent && p.TransactionID == x.pi:
				left = append(left, x)
			default:
				settled++
			}
		}
		due = left
		if len(due) == 0 {
			return settled, 0
		}
		select {
		case <-ctx.Done():
			return settled, len(due)
		case <-deadline.C:
			return settled, len(due)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
