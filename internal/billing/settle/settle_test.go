package settle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// The settle kernel as a table: (period state, outcome) → (period state,
// history entry, receipt, actions), one row per transition of
// docs/design.md §8 ("Failures", "Declines that retrying cannot fix",
// "One successful charge per period", "Process values", the lifecycle
// table of docs/billing.md). The expectations are written from those
// rules: retry days 1, 3, 5, 7 and STALE on day 30 after the charge date.

var (
	kDay     = dates.MustParse("2027-03-10") // the period's charge date
	kNow     = time.Date(2027, 3, 10, 9, 0, 0, 0, time.UTC)
	kExpires = time.Date(2028, 3, 10, 9, 0, 0, 0, time.UTC)
	kRules   = Rules{
		Retry: dates.RetryPolicy{Days: []int{1, 3, 5, 7}, StaleDays: 30},
		Hard:  func(code string) bool { return code == "expired_card" || code == "authentication_required" },
	}
)

func kDate(s string) dates.Date { return dates.MustParse(s) }

// kPeriod is a period charged on kDay for 2500 usd (plan gold).
func kPeriod(status model.Status, attempts int, pi string) model.Period {
	return model.Period{AccountID: "acc-1", SubscriptionID: "sub-1", SKU: "gold", BillingDate: kDay, Amount: 2500, Currency: "usd",
		PaymentDetails: model.PaymentDetails{Customer: "cus_1", PaymentMethod: "pm_old", StripeAccount: "acct_1"}, Email: "a@example.com",
		Status: status, Process: model.ProcInitial, Attempts: attempts, TransactionID: pi, Version: 3}
}

// inFlight marks attempt attempts+1 on p as made on day.
func inFlight(p model.Period, day string) model.Period {
	at := kDate(day).Time().Add(9 * time.Hour)
	p.InFlightKey, p.InFlightAt, p.InFlightSent = model.IdempotencyKey(p, p.Attempts+1), at, at
	return p
}

func kSub() model.Subscription {
	return model.Subscription{AccountID: "acc-1", SubscriptionID: "sub-1", SKU: "platinum", Amount: 3000, Currency: "usd",
		PaymentDetails: model.PaymentDetails{Customer: "cus_1", PaymentMethod: "pm_new", StripeAccount: "acct_1"}, Status: model.SubActive}
}

type kReceipt struct {
	pi        string
	processed string
	amount    int64
	sku       string
}

type kAction struct {
	typ         string
	amount      int64
	declineCode string
	notRetried  bool
}

type kWant struct {
	// history entry: none when status is "".
	status  model.Status
	process model.Process
	event   string
	// the period afterwards
	attempts int
	next     string // NextAttemptDate ("" : none)
	pi       string // TransactionID
	amount   int64
	sku      string
	inFlight bool
	// effects
	receipt    *kReceipt
	action     *kAction
	charged    bool // the subscription moves on
	gaveUp     bool
	refund     string
	confirm    bool
	retryLater bool
	warn       bool
	class      string
}

func TestSettleTable(t *testing.T) {
	sched := kPeriod(model.Scheduled, 0, "")
	errSoft := kPeriod(model.Error, 1, "pi_a1")
	errSoft.Process, errSoft.DeclineCode, errSoft.NextAttemptDate = model.ProcInitial, "insufficient_funds", kDate("2027-03-11")
	errHard := kPeriod(model.Error, 1, "pi_a1")
	errHard.DeclineCode, errHard.NotRetried, errHard.NextAttemptDate = "expired_card", true, kDate("2027-04-09")
	ach := kPeriod(model.ACHSent, 1, "pi_a1")
	done := kPeriod(model.Completed, 1, "pi_a1")
	refunded := kPeriod(model.Refunded, 1, "pi_a1")
	waived := kPeriod(model.Waived, 0, "")
	cancelled := kPeriod(model.Cancelled, 1, "pi_a1")
	skipped := kPeriod(model.PausedSkipped, 0, "")
	stale := kPeriod(model.Stale, 2, "pi_a2")
	cancelledSub := kSub()
	cancelledSub.Status = model.SubCancelled

	rows := []struct {
		name string
		in   Input
		want kWant
	}{
		// The job's (and pay now's, a batch's, a resolved lookup's) answer
		// to the attempt in flight.
		{"scheduled, charge succeeded: COMPLETED with a receipt",
			Input{Period: inFlight(sched, "2027-03-10"), Happened: HappenedSucceeded, PaymentIntent: "pi_1", OfAttempt: true, AttemptNo: 1, Process: model.ProcInitial},
			kWant{status: model.Completed, process: model.ProcInitial, event: "completed", attempts: 1, pi: "pi_1", amount: 2500, sku: "gold",
				receipt: &kReceipt{"pi_1", "2027-03-10", 2500, "gold"}, action: &kAction{typ: model.ActionPaymentCompleted, amount: 2500}, charged: true}},
		{"scheduled, bank debit submitted: ACHSENT, no receipt yet",
			Input{Period: inFlight(sched, "2027-03-10"), Happened: HappenedProcessing, PaymentIntent: "pi_1", OfAttempt: true, AttemptNo: 1, Process: model.ProcInitial},
			kWant{status: model.ACHSent, process: model.ProcInitial, event: "ach-sent", attempts: 1, pi: "pi_1", amount: 2500, sku: "gold", charged: true}},
		{"scheduled, soft decline: ERROR, next retry day 1",
			Input{Period: inFlight(sched, "2027-03-10"), Happened: HappenedDeclined, PaymentIntent: "pi_1", OfAttempt: true, AttemptNo: 1, Process: model.ProcInitial,
				Error: "Your card has insufficient funds.", DeclineCode: "insufficient_funds"},
			kWant{status: model.Error, process: model.ProcInitial, event: "attempt-failed", attempts: 1, next: "2027-03-11", pi: "pi_1", amount: 2500, sku: "gold",
				action: &kAction{typ: model.ActionPaymentFailed, amount: 2500, declineCode: "insufficient_funds"}, charged: true, class: "soft"}},
		{"scheduled, hard decline: ERROR not retried, next look its stale date",
			Input{Period: inFlight(sched, "2027-03-10"), Happened: HappenedDeclined, PaymentIntent: "pi_1", OfAttempt: true, AttemptNo: 1, Process: model.ProcInitial,
				Error: "Your card has expired.", DeclineCode: "expired_card"},
			kWant{status: model.Error, process: model.ProcInitial, event: "declined-not-retried", attempts: 1, next: "2027-04-09", pi: "pi_1", amount: 2500, sku: "gold",
				action: &kAction{typ: model.ActionPaymentFailed, amount: 2500, declineCode: "expired_card", notRetried: true}, charged: true, class: "hard"}},
		{"error, retry declined softly again: the next retry day",
			Input{Period: inFlight(errSoft, "2027-03-11"), Happened: HappenedDeclined, PaymentIntent: "pi_2", OfAttempt: true, AttemptNo: 2, Process: model.ProcRetry,
				Today: kDate("2027-03-11"), Error: "declined", DeclineCode: "insufficient_funds"},
			kWant{status: model.Error, process: model.ProcRetry, event: "attempt-failed", attempts: 2, next: "2027-03-13", pi: "pi_2", amount: 2500, sku: "gold",
				action: &kAction{typ: model.ActionPaymentFailed, amount: 2500, declineCode: "insufficient_funds"}, charged: true, class: "soft"}},
		{"error, a decline answered days late: the retry due since the attempt's day is due at once",
			Input{Period: inFlight(errSoft, "2027-03-11"), Happened: HappenedDeclined, PaymentIntent: "pi_2", OfAttempt: true, AttemptNo: 2, Process: model.ProcRetry,
				Today: kDate("2027-03-16"), Error: "declined", DeclineCode: "card_declined"},
			kWant{status: model.Error, process: model.ProcRetry, event: "attempt-failed", attempts: 2, next: "2027-03-13", pi: "pi_2", amount: 2500, sku: "gold",
				action: &kAction{typ: model.ActionPaymentFailed, amount: 2500, declineCode: "card_declined"}, charged: true, class: "soft"}},
		{"error, retry succeeded: COMPLETED, the decline cleared",
			Input{Period: inFlight(errSoft, "2027-03-11"), Happened: HappenedSucceeded, PaymentIntent: "pi_2", OfAttempt: true, AttemptNo: 2, Process: model.ProcRetry,
				Today: kDate("2027-03-11")},
			kWant{status: model.Completed, process: model.ProcRetry, event: "completed", attempts: 2, pi: "pi_2", amount: 2500, sku: "gold",
				receipt: &kReceipt{"pi_2", "2027-03-11", 2500, "gold"}, action: &kAction{typ: model.ActionPaymentCompleted, amount: 2500}, charged: true}},
		{"hard-declined error, pay now succeeded: COMPLETED, process MANUAL_REPAYMENT",
			Input{Period: inFlight(errHard, "2027-03-12"), Happened: HappenedSucceeded, PaymentIntent: "pi_2", OfAttempt: true, AttemptNo: 2,
				Process: model.ProcManualRepayment, Today: kDate("2027-03-12")},
			kWant{status: model.Completed, process: model.ProcManualRepayment, event: "completed", attempts: 2, pi: "pi_2", amount: 2500, sku: "gold",
				receipt: &kReceipt{"pi_2", "2027-03-12", 2500, "gold"}, action: &kAction{typ: model.ActionPaymentCompleted, amount: 2500}, charged: true}},
		{"error, batch charge submitted a bank debit: ACHSENT, process BATCH",
			Input{Period: inFlight(errSoft, "2027-03-12"), Happened: HappenedProcessing, PaymentIntent: "pi_2", OfAttempt: true, AttemptNo: 2,
				Process: model.ProcBatch, Today: kDate("2027-03-12")},
			kWant{status: model.ACHSent, process: model.ProcBatch, event: "ach-sent", attempts: 2, pi: "pi_2", amount: 2500, sku: "gold", charged: true}},
		{"unknown outcome: nothing changes, the attempt stays in flight",
			Input{Period: inFlight(sched, "2027-03-10"), Happened: HappenedUnknown, OfAttempt: true, AttemptNo: 1, Process: model.ProcInitial},
			kWant{attempts: 0, amount: 2500, sku: "gold", inFlight: true}},
		{"unknown outcome looked up, not found: the lost attempt is recorded, the period stays to be charged anew",
			Input{Period: inFlight(sched, "2027-03-10"), Happened: HappenedLost, Process: model.ProcInitial, Today: kDate("2027-03-11")},
			kWant{status: model.Scheduled, process: model.ProcInitial, event: "attempt-lost", attempts: 1, amount: 2500, sku: "gold"}},
		{"lost attempt found past the stale date: STALE, never charged",
			Input{Period: inFlight(errSoft, "2027-03-17"), Happened: HappenedLost, Process: model.ProcRetry, Today: kDate("2027-04-09")},
			kWant{status: model.Stale, process: model.ProcRetry, event: "stale", attempts: 2, pi: "pi_a1", amount: 2500, sku: "gold", gaveUp: true}},

		// Stripe's webhook feed, and a payment the customer made that a
		// cancel found: the attempt's PaymentIntent known to the period.
		// Their callers pass the period's own process (model.FeedProcess:
		// here INITIAL, the process of every fixture), never WEBHOOK, which
		// is the platform's triggers' (docs/design.md §8 "Process values").
		{"the webhook of the attempt in flight (its answer was lost): succeeded",
			Input{Period: inFlight(sched, "2027-03-10"), Happened: HappenedSucceeded, PaymentIntent: "pi_1", OfAttempt: true, Process: model.ProcInitial,
				Processed: kDate("2027-03-10")},
			kWant{status: model.Completed, process: model.ProcInitial, event: "completed", attempts: 1, pi: "pi_1", amount: 2500, sku: "gold",
				receipt: &kReceipt{"pi_1", "2027-03-10", 2500, "gold"}, action: &kAction{typ: model.ActionPaymentCompleted, amount: 2500}, charged: true}},
		{"the webhook of the attempt in flight: declined",
			Input{Period: inFlight(sched, "2027-03-10"), Happened: HappenedDeclined, PaymentIntent: "pi_1", OfAttempt: true, Process: model.ProcInitial,
				Error: "declined", DeclineCode: "authentication_required"},
			kWant{status: model.Error, process: model.ProcInitial, event: "declined-not-retried", attempts: 1, next: "2027-04-09", pi: "pi_1", amount: 2500, sku: "gold",
				action: &kAction{typ: model.ActionPaymentFailed, amount: 2500, declineCode: "authentication_required", notRetried: true}, charged: true, class: "hard"}},
		{"ACHSENT, the bank debit settled: COMPLETED with a receipt of the settlement's date",
			Input{Period: ach, Happened: HappenedSucceeded, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial,
				Today: kDate("2027-03-14"), Processed: kDate("2027-03-14"), Amount: 2500, Currency: "usd", SKU: "gold"},
			kWant{status: model.Completed, process: model.ProcInitial, event: model.UpdatedEventACHCompleted, attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold",
				receipt: &kReceipt{"pi_a1", "2027-03-14", 2500, "gold"}, action: &kAction{typ: model.ActionPaymentCompleted, amount: 2500}, charged: true}},
		{"ACHSENT, the bank debit returned: ERROR on the retry days, retried at the subscription's amount, plan and method",
			Input{Period: ach, Sub: kSub(), Happened: HappenedDeclined, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial,
				Today: kDate("2027-03-12"), Error: "insufficient funds", DeclineCode: "insufficient_funds"},
			kWant{status: model.Error, process: model.ProcInitial, event: model.UpdatedEventACHReturned, attempts: 1, next: "2027-03-13", pi: "pi_a1", amount: 3000, sku: "platinum",
				action: &kAction{typ: model.ActionPaymentFailed, amount: 2500, declineCode: "insufficient_funds"}, class: "soft"}},
		{"ACHSENT, returned with a hard code: not retried",
			Input{Period: ach, Sub: kSub(), Happened: HappenedDeclined, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial,
				Today: kDate("2027-03-12"), Error: "closed", DeclineCode: "expired_card"},
			kWant{status: model.Error, process: model.ProcInitial, event: "declined-not-retried", attempts: 1, next: "2027-04-09", pi: "pi_a1", amount: 3000, sku: "platinum",
				action: &kAction{typ: model.ActionPaymentFailed, amount: 2500, declineCode: "expired_card", notRetried: true}, class: "hard"}},
		{"ACHSENT, returned after the subscription was cancelled: CANCELLED",
			Input{Period: ach, Sub: cancelledSub, Happened: HappenedDeclined, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial,
				Today: kDate("2027-03-12"), Error: "insufficient funds", DeclineCode: "insufficient_funds"},
			kWant{status: model.Cancelled, process: model.ProcInitial, event: model.UpdatedEventACHReturned, attempts: 1, pi: "pi_a1", amount: 3000, sku: "platinum",
				action: &kAction{typ: model.ActionPaymentFailed, amount: 2500, declineCode: "insufficient_funds"}, class: "soft"}},
		{"ACHSENT, a decline of another PaymentIntent: nothing",
			Input{Period: ach, Happened: HappenedDeclined, PaymentIntent: "pi_other", Known: true, Process: model.ProcInitial},
			kWant{attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold"}},
		{"COMPLETED, refunded in full: REFUNDED",
			Input{Period: done, Happened: HappenedRefunded, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial},
			kWant{status: model.Refunded, process: model.ProcInitial, event: model.UpdatedEventRefunded, attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold"}},
		{"REFUNDED, the refund again: nothing",
			Input{Period: refunded, Happened: HappenedRefunded, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial},
			kWant{attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold"}},
		{"COMPLETED, the refund of a duplicate it refunded itself: nothing",
			Input{Period: done, Happened: HappenedRefunded, PaymentIntent: "pi_dup", Known: true, RefundedAlready: true, Process: model.ProcInitial},
			kWant{attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold"}},
		{"ACHSENT, a refund before its success (out of order): retried later",
			Input{Period: ach, Happened: HappenedRefunded, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial},
			kWant{attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold", retryLater: true}},
		{"WAIVED, a refund of a charge it does not record: ignored, logged",
			Input{Period: waived, Happened: HappenedRefunded, PaymentIntent: "pi_x", Known: true, Process: model.ProcInitial},
			kWant{amount: 2500, sku: "gold", warn: true}},
		{"COMPLETED, its own success again: nothing",
			Input{Period: done, Happened: HappenedSucceeded, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial},
			kWant{attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold"}},
		{"COMPLETED, a second success: refunded, duplicate-refunded",
			Input{Period: done, Happened: HappenedSucceeded, PaymentIntent: "pi_old", Known: true, Process: model.ProcInitial, Amount: 2500, Currency: "usd"},
			kWant{status: model.Completed, process: model.ProcInitial, event: model.UpdatedEventDuplicateRefunded, attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold", refund: "pi_old"}},
		{"REFUNDED, a second success: refunded",
			Input{Period: refunded, Happened: HappenedSucceeded, PaymentIntent: "pi_old", Known: true, Process: model.ProcInitial, Amount: 2500, Currency: "usd"},
			kWant{status: model.Refunded, process: model.ProcInitial, event: model.UpdatedEventDuplicateRefunded, attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold", refund: "pi_old"}},
		{"WAIVED, a success: refunded",
			Input{Period: waived, Happened: HappenedSucceeded, PaymentIntent: "pi_old", Known: true, Process: model.ProcInitial, Amount: 2500, Currency: "usd"},
			kWant{status: model.Waived, process: model.ProcInitial, event: model.UpdatedEventDuplicateRefunded, amount: 2500, sku: "gold", refund: "pi_old"}},
		{"CANCELLED, a success: refunded",
			Input{Period: cancelled, Happened: HappenedSucceeded, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial, Amount: 2500, Currency: "usd"},
			kWant{status: model.Cancelled, process: model.ProcInitial, event: model.UpdatedEventDuplicateRefunded, attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold", refund: "pi_a1"}},
		{"PAUSED_SKIPPED, a success: refunded",
			Input{Period: skipped, Happened: HappenedSucceeded, PaymentIntent: "pi_old", Known: true, Process: model.ProcInitial, Amount: 2500, Currency: "usd"},
			kWant{status: model.PausedSkipped, process: model.ProcInitial, event: model.UpdatedEventDuplicateRefunded, amount: 2500, sku: "gold", refund: "pi_old"}},
		{"COMPLETED, a second success refunded already (redelivery, another replica): nothing",
			Input{Period: done, Happened: HappenedSucceeded, PaymentIntent: "pi_old", Known: true, RefundedAlready: true, Process: model.ProcInitial},
			kWant{attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold"}},
		{"STALE, a late payment: COMPLETED with a receipt",
			Input{Period: stale, Happened: HappenedSucceeded, PaymentIntent: "pi_a2", Known: true, Process: model.ProcInitial,
				Today: kDate("2027-04-20"), Processed: kDate("2027-04-20"), Amount: 2500, Currency: "usd", SKU: "gold"},
			kWant{status: model.Completed, process: model.ProcInitial, event: model.UpdatedEventLatePayment, attempts: 2, pi: "pi_a2", amount: 2500, sku: "gold",
				receipt: &kReceipt{"pi_a2", "2027-04-20", 2500, "gold"}, action: &kAction{typ: model.ActionPaymentCompleted, amount: 2500}, charged: true, warn: true}},
		{"ERROR, the customer paid an earlier attempt's PaymentIntent: COMPLETED at that attempt's amount and plan",
			Input{Period: errSoft, Happened: HappenedSucceeded, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial,
				Today: kDate("2027-03-12"), Processed: kDate("2027-03-12"), Amount: 2000, Currency: "usd", SKU: "silver", RefAmount: 2000, RefCurrency: "usd"},
			kWant{status: model.Completed, process: model.ProcInitial, event: "completed", attempts: 1, pi: "pi_a1", amount: 2000, sku: "silver",
				receipt: &kReceipt{"pi_a1", "2027-03-12", 2000, "silver"}, action: &kAction{typ: model.ActionPaymentCompleted, amount: 2000}, charged: true}},
		{"ERROR with an attempt in flight, an earlier PaymentIntent succeeded: retried once the attempt is recorded",
			Input{Period: inFlight(errSoft, "2027-03-11"), Happened: HappenedSucceeded, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial, Amount: 2500, Currency: "usd"},
			kWant{attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold", inFlight: true, retryLater: true}},
		{"ERROR, the customer paid an earlier PaymentIntent by bank debit: ACHSENT once Stripe confirms it is processing",
			Input{Period: errSoft, Happened: HappenedProcessing, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial},
			kWant{status: model.ACHSent, process: model.ProcInitial, event: "ach-sent", attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold", confirm: true}},
		{"SCHEDULED, processing of a PaymentIntent it records (an older event): nothing",
			Input{Period: kPeriod(model.Scheduled, 1, "pi_a1"), Happened: HappenedProcessing, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial},
			kWant{attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold"}},
		{"COMPLETED, a decline event arriving after (an older event): nothing",
			Input{Period: done, Happened: HappenedDeclined, PaymentIntent: "pi_a1", Known: true, Process: model.ProcInitial},
			kWant{attempts: 1, pi: "pi_a1", amount: 2500, sku: "gold"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			in := r.in
			if in.Sub.SubscriptionID == "" {
				in.Sub = kSub()
			}
			if in.Today.IsZero() {
				in.Today = kDay
			}
			if in.Processed.IsZero() {
				in.Processed = in.Today
			}
			in.Now, in.ReceiptExpires, in.Rules = kNow, kExpires, kRules
			before := in.Period
			st := Decide(in)
			w := r.want
			p := st.Period

			// the period afterwards
			assert.Equal(t, w.attempts, p.Attempts, "attempts")
			assert.Equal(t, w.pi, p.TransactionID, "transaction_id")
			assert.Equal(t, w.amount, p.Amount, "amount")
			assert.Equal(t, w.sku, p.SKU, "sku")
			assert.Equal(t, w.inFlight, p.InFlightKey != "", "attempt in flight")
			if w.status != "" {
				next := ""
				if !p.NextAttemptDate.IsZero() {
					next = p.NextAttemptDate.String()
				}
				assert.Equal(t, w.next, next, "next look")
			}
			if w.status == model.Completed {
				assert.Empty(t, p.DeclineCode, "a success clears the decline")
				assert.False(t, p.NotRetried)
				assert.Empty(t, p.Error)
			}
			if w.action != nil && w.action.notRetried {
				assert.True(t, p.NotRetried, "hard decline recorded on the period")
				assert.Equal(t, w.action.declineCode, p.DeclineCode)
			}

			// the history entry
			if st.Refund != "" {
				st.Refunded("re_1")
			}
			tx := model.NewTx("test", kNow)
			if st.Write {
				st.Put(tx)
			}
			if w.status == "" {
				assert.False(t, st.Write, "no change written")
				assert.Empty(t, tx.History())
				assert.Equal(t, before.Status, p.Status, "status unchanged")
			} else {
				require.True(t, st.Write, "a change written")
				require.Len(t, tx.History(), 1)
				h := tx.History()[0]
				assert.Equal(t, w.status, h.Status, "history status")
				assert.Equal(t, w.process, h.Process, "history process")
				assert.Equal(t, w.event, h.UpdatedEvent, "history updated_event")
				assert.Equal(t, before.Version+1, h.Version, "the period's next version")
			}

			// the receipt
			var receipts []model.Receipt
			var refs []model.PaymentRef
			for _, wr := range tx.Writes() {
				switch wr.Op {
				case model.OpPutReceipt:
					receipts = append(receipts, wr.Receipt)
				case model.OpPutPaymentRef:
					refs = append(refs, wr.PaymentRef)
				}
			}
			if w.receipt == nil {
				assert.Empty(t, receipts, "no receipt")
			} else {
				require.Len(t, receipts, 1)
				rc := receipts[0]
				assert.Equal(t, w.receipt.pi, rc.PaymentIntent)
				assert.Equal(t, w.receipt.processed, rc.ProcessedDate.String())
				assert.Equal(t, w.receipt.amount, rc.Amount)
				assert.Equal(t, w.receipt.sku, rc.SKU)
				assert.Equal(t, "usd", rc.Currency)
				assert.Equal(t, kDay, rc.BillingDate)
				assert.Equal(t, kExpires, rc.ExpiresAt)
				require.Len(t, refs, 1, "the PaymentIntent that paid is referenced")
				assert.Equal(t, w.receipt.pi, refs[0].PaymentIntent)
			}

			// the actions
			if w.action == nil {
				assert.Nil(t, st.Action, "no action")
			} else {
				require.NotNil(t, st.Action)
				a := st.Action.BillingDetails
				assert.Equal(t, w.action.typ, st.Action.Type)
				assert.Equal(t, w.action.amount, a.Amount)
				assert.Equal(t, w.action.declineCode, a.DeclineCode)
				assert.Equal(t, w.action.notRetried, a.NotRetried)
				assert.Equal(t, r.in.PaymentIntent, a.PaymentIntent)
				assert.Equal(t, r.in.AttemptNo, a.Attempt)
			}
			assert.Equal(t, w.charged, st.Charged, "the subscription moves on")
			assert.Equal(t, w.gaveUp, st.GaveUp, "given up on")
			assert.Equal(t, w.refund, st.Refund, "refund")
			if w.refund != "" {
				require.Len(t, refs, 1)
				assert.Equal(t, model.PaymentRef{PaymentIntent: w.refund, AccountID: "acc-1", SubscriptionID: "sub-1", BillingDate: kDay,
					Amount: 2500, Currency: "usd", RefundID: "re_1"}, refs[0], "one refund per PaymentIntent, recorded on its reference")
				assert.Contains(t, st.Period.Error, "re_1", "the history says which refund")
			}
			assert.Equal(t, w.confirm, st.Confirm, "confirm with Stripe first")
			assert.Equal(t, w.retryLater, st.RetryLater != "", "retry later: %s", st.RetryLater)
			assert.Equal(t, w.warn, st.Warn != "", "warn: %s", st.Warn)
			assert.Equal(t, w.class, st.Declined, "decline class")
		})
	}
}

// An answer Stripe gave is settled as a decline unless it says the money
// moved or a debit is processing: an attempt answered never stays in flight.
func TestSettleAnAnswerIsNeverUnknown(t *testing.T) {
	for _, o := range []model.Outcome{model.Unknown, model.Declined} {
		assert.Equal(t, HappenedDeclined, HappenedOf(o), "outcome %d", o)
	}
	assert.Equal(t, HappenedSucceeded, HappenedOf(model.Succeeded))
	assert.Equal(t, HappenedProcessing, HappenedOf(model.Processing))
}

// docs/design.md §8 "Process values are the source document's": a change
// Stripe's feed makes records the period's own process (the attempt's),
// never WEBHOOK; a record without one reads NOT_IDENTIFIED.
func TestFeedProcessKeepsThePeriodsOwn(t *testing.T) {
	for _, proc := range []model.Process{model.ProcInitial, model.ProcRetry, model.ProcBatch, model.ProcManualRepayment, model.ProcReactivation, model.ProcWebhook, model.ProcWebhookBalance} {
		p := kPeriod(model.ACHSent, 1, "pi_a1")
		p.Process = proc
		assert.Equal(t, proc, model.FeedProcess(p))
	}
	assert.Equal(t, model.ProcNotIdentified, model.FeedProcess(model.Period{}))
}
