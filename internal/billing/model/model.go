// Package model is the billing core's vocabulary (docs/design.md §8):
// subscriptions with a payment day, billing periods that move through the
// lifecycle SCHEDULED → COMPLETED …, receipts, the append-only history, a
// change as a Tx, a job's Report, and the small interfaces the core works
// over (deps.go): a Store it reads and commits a Tx to, a Charger, a
// Notifier and an Observer. It is the leaf of the billing packages: every
// other one imports it, it imports none of them. The implementations of
// its interfaces live at the edge (internal/billing/store, stripecharge,
// notify) and import only this package.
package model

import (
	"errors"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// Errors of the billing vocabulary (apperr's; the store translates
// DynamoDB's). What is missing is apperr.ErrNotFound and a request that
// breaks a rule (bad state, bad value, a cursor no listing issued)
// apperr.ErrInvalid, each with a message saying which. The conflicts are
// sentinels of their own (code conflict, the message a client sees):
// callers retry some and refuse others, so errors.Is on each keeps its
// meaning; apperr.ErrConflict matches all of them and is no substitute.
var (
	// ErrConflict: an item changed since it was read; re-read and retry.
	ErrConflict = apperr.New(apperr.CodeConflict, "changed concurrently, or a payment attempt is in flight; retry shortly")
	// ErrDuplicate: a different subscription has this id.
	ErrDuplicate = apperr.New(apperr.CodeConflict, "a different subscription with this id exists")
	// ErrLocked: the account's billing lock is held by someone else (a
	// collection in progress); try again shortly.
	ErrLocked = apperr.New(apperr.CodeConflict, "the account is being billed right now; retry shortly")
	// ErrRetryLater: a webhook arrived before the state it applies to
	// (e.g. a refund before its success); the feed retries it.
	ErrRetryLater = errors.New("not applicable yet")
)

// SubStatus is the state of a subscription.
type SubStatus string

const (
	SubActive    SubStatus = "ACTIVE"
	SubPaused    SubStatus = "PAUSED"
	SubCancelled SubStatus = "CANCELLED"
)

// Status is the state of one billing period (reference 003).
type Status string

const (
	// Scheduled: awaiting its first collection attempt.
	Scheduled Status = "SCHEDULED"
	// ACHSent: submitted; Stripe reports the PaymentIntent as processing
	// (bank debits) until a webhook settles it.
	ACHSent Status = "ACHSENT"
	// Completed: collected. Terminal (but for a later refund).
	Completed Status = "COMPLETED"
	// Error: the latest attempt failed; retried on the retry schedule.
	Error Status = "ERROR"
	// Waived: forgiven without payment. Terminal.
	Waived Status = "WAIVED"
	// Cancelled: the subscription was cancelled before collection. Terminal.
	Cancelled Status = "CANCELLED"
	// Paused: billing paused for PauseDurationMonths.
	Paused Status = "PAUSED"
	// PausedSkipped: the period fell in a pause window and was skipped. Terminal.
	PausedSkipped Status = "PAUSED_SKIPPED"
	// Refunded: collected, then refunded in full. Terminal.
	Refunded Status = "REFUNDED"
	// Stale: too old to collect (past the stale threshold). Terminal.
	Stale Status = "STALE"
)

// Terminal reports whether no job will touch a period in s again.
func (s Status) Terminal() bool {
	switch s {
	case Completed, Waived, Cancelled, PausedSkipped, Refunded, Stale:
		return true
	}
	return false
}

// Process is what made a change (reference 003, plus ADMIN for the API).
type Process string

const (
	ProcInitial Process = "INITIAL"
	ProcRetry   Process = "RETRY"
	ProcPause   Process = "PAUSE"
	// ProcWebhook and ProcWebhookBalance are collections the platform
	// triggered (income detected, a first balance; collect/triggered.go), never
	// Stripe's webhook feed, whose changes keep the attempt's own process
	// (FeedProcess). Rows written before 2026-11-28 used WEBHOOK for the
	// feed (docs/billing.md).
	ProcWebhook         Process = "WEBHOOK"
	ProcWebhookBalance  Process = "WEBHOOK_BALANCE"
	ProcBatch           Process = "BATCH"
	ProcManualRepayment Process = "MANUAL_REPAYMENT"
	ProcAdmin           Process = "ADMIN"
	ProcNotIdentified   Process = "NOT_IDENTIFIED"
)

// PaymentDetails is how a subscription is charged: a customer and a saved
// payment method on a connected account.
type PaymentDetails struct {
	Customer      string `dynamodbav:"Customer"`
	PaymentMethod string `dynamodbav:"PaymentMethod"`
	StripeAccount string `dynamodbav:"StripeAccount"`
}

// Subscription is an account's agreement to pay Amount on a payment day.
type Subscription struct {
	AccountID      string
	SubscriptionID string
	SKU            string
	Email          string
	PaymentDay     int
	BillingWeek    int // 1–5: Friday billing on that Friday of the month
	Amount         int64
	Currency       string
	Term           dates.Term
	Timezone       string
	PaymentDetails PaymentDetails
	Status         SubStatus
	// TestClock is the test clock the subscription lives on (empty: real
	// time). Its "today" is the clock's, and only that clock's advances run
	// its jobs: its index entries are in the clock's own partitions.
	TestClock string

	// StartDate is the create request's start_date (zero: none): no period
	// is ever scheduled before it.
	StartDate dates.Date
	// NextPeriodDate is the scheduled date of the period the collection job
	// acts on next: the subscription's cursor. Its record exists (SCHEDULED,
	// or PAUSED while a pause lasts) and is keyed by that scheduled date
	// whatever date it is charged on. Later periods follow from the rule:
	// Rule().Next of a period's scheduled date, never of its charge date.
	NextPeriodDate dates.Date
	// DueDate is when the job acts on that period: its charge date, or the
	// scheduled date of a PAUSED one (it becomes PAUSED_SKIPPED then). The
	// payments index is keyed on it.
	DueDate dates.Date
	// NextPaymentDate is the date of the next charge: the charge date of
	// the next period, or of the first one after a pause (the API's
	// next_payment_date).
	NextPaymentDate  dates.Date
	NextReminderDate dates.Date
	// RemindFor is the scheduled date of the period the pending reminder
	// announces (one reminder per period; it announces the charge date).
	RemindFor dates.Date
	// LastPaymentDate is the charge date of the latest COMPLETED period.
	LastPaymentDate  dates.Date
	LastReminderDate dates.Date
	// LastChargedPeriod is the scheduled date of the latest period a charge
	// was made for (whatever its outcome): a rule change schedules the next
	// period at least one term after it.
	LastChargedPeriod dates.Date
	// ReminderPending is set between the conditional claim of a reminder and
	// its completion, so a crash in between resends (deduplicated).
	ReminderPending dates.Date

	// A pause: PausedFrom and PausedUntil are the scheduled dates of the
	// first and the last PAUSED period (their records exist from the pause
	// on); the subscription is PAUSED until the last one is skipped or it is
	// resumed.
	PausedFrom  dates.Date
	PausedUntil dates.Date
	PauseMonths int

	// PendingDowngrade: a plan change lowered the amount and no period has
	// been charged at the new plan yet (plan.go; reference 003's
	// is_pending_downgrade).
	PendingDowngrade bool

	CreatedAt time.Time
	UpdatedAt time.Time
	Version   int64
}

// Rule is the subscription's billing-date rule.
func (s Subscription) Rule() dates.Rule {
	return dates.Rule{Day: s.PaymentDay, Week: s.BillingWeek, Term: s.Term}
}

// Location is the subscription's time zone (UTC when unset or unknown).
func (s Subscription) Location() *time.Location {
	if s.Timezone == "" {
		return time.UTC
	}
	loc, err := time.LoadLocation(s.Timezone)
	if err != nil {
		return time.UTC
	}
	return loc
}

// Period is one billing period of a subscription: the record the lifecycle
// statuses live on (reference 003's billing-activity record).
type Period struct {
	AccountID      string
	SubscriptionID string
	SKU            string
	// BillingDate is the period's scheduled date: its identity (key,
	// idempotency key, billing_date metadata) for good.
	BillingDate dates.Date
	// ChargeDate is the date an operator moved the charge to (zero: the
	// scheduled date). Only this period moves; later ones keep their dates.
	ChargeDate dates.Date
	// Term and BillingWeek are the rule the period was scheduled under (its
	// length: a rule change keeps one such term after it). Zero on records
	// written before rule changes could change the term: the subscription's.
	Term           dates.Term
	BillingWeek    int
	Amount         int64
	Currency       string
	PaymentDetails PaymentDetails
	Email          string
	// TestClock is the subscription's test clock (empty: real time).
	TestClock string

	Status       Status
	Process      Process
	UpdatedEvent string
	// TransactionID is the PaymentIntent of the latest attempt.
	TransactionID string
	Error         string
	// DeclineCode is Stripe's code of the latest decline ("" after any
	// other outcome); NotRetried: it is one retrying cannot fix, so the
	// period has no retry days (decline.go).
	DeclineCode string
	NotRetried  bool
	// HardDeclinedMethod is the payment method a hard decline refused
	// (NotRetried): a platform trigger tries the period again only once
	// its payment method is another one (collect/triggered.go). Empty on records
	// written before it was kept: the trigger waits.
	HardDeclinedMethod string
	Attempts           int
	// InFlightKey is the idempotency key of an attempt whose outcome is not
	// recorded yet (a crash between the charge and the write). A rerun
	// reuses it, so Stripe answers with the same PaymentIntent.
	InFlightKey string
	InFlightAt  time.Time
	// InFlightSent is when the attempt was made in real time: Stripe keeps
	// idempotency keys and dates PaymentIntents on its own clock, which a
	// test clock's InFlightAt is not (zero on older records: InFlightAt).
	InFlightSent time.Time
	// NextAttemptDate: when the collection job looks at this period again
	// (a retry, or the stale mark); zero when no job needs to.
	NextAttemptDate dates.Date
	// TriggeredAt is when a platform trigger last claimed an attempt on
	// the period (the subscription's time: a test clock's): at most one
	// per BILLING_TRIGGER_MIN_GAP (collect/triggered.go).
	TriggeredAt time.Time

	PauseDurationMonths int
	CreatedDate         time.Time
	InitialRunDate      time.Time
	LastRunDate         time.Time
	CompletionDate      time.Time
	Version             int64
}

// Due is the date the period is charged on: its scheduled date, or the
// date it was moved to.
func (p Period) Due() dates.Date {
	if p.ChargeDate.IsZero() {
		return p.BillingDate
	}
	return p.ChargeDate
}

// OneTermAfter is one term of the period's own rule after its scheduled
// date (fallback: the rule of a record that does not say).
func (p Period) OneTermAfter(fallback dates.Rule) dates.Date {
	r := fallback
	if p.Term != "" {
		r = dates.Rule{Week: p.BillingWeek, Term: p.Term}
	}
	return r.OneTermAfter(p.BillingDate)
}

// SentAt is when the attempt in flight was sent, in real time.
func (p Period) SentAt() time.Time {
	if p.InFlightSent.IsZero() {
		return p.InFlightAt
	}
	return p.InFlightSent
}

// Receipt records one successful charge.
type Receipt struct {
	AccountID      string
	SubscriptionID string
	SKU            string
	ProcessedDate  dates.Date
	BillingDate    dates.Date
	Amount         int64
	Currency       string
	PaymentIntent  string
	// PaymentMethodType and PaymentMethodLast4: how it was paid, from the
	// charge Stripe made (empty when Stripe did not say).
	PaymentMethodType  string
	PaymentMethodLast4 string
	ExpiresAt          time.Time
}

// HistoryEntry is one change of a billing period, as appended to the
// history table before the change is written.
type HistoryEntry struct {
	AccountID      string
	SubscriptionID string
	BillingDate    dates.Date
	Status         Status
	Process        Process
	UpdatedEvent   string
	LastRunDate    time.Time
	TransactionID  string
	Error          string
	Amount         int64
	Attempts       int
	Version        int64
	// Cause names what made the change: a job attempt, an event id, an
	// API request.
	Cause string
}

// PaymentRef maps a PaymentIntent back to its billing period, for Stripe
// events that do not carry the billing metadata (a refund's charge), and
// records what the attempt that created it asked for: the webhook feed
// compares a PaymentIntent with that, not with the period's amount today
// (docs/design.md §8 "Webhook feed trust").
type PaymentRef struct {
	PaymentIntent  string
	AccountID      string
	SubscriptionID string
	BillingDate    dates.Date
	// Amount and Currency of the attempt (zero on references written
	// before they were recorded: the period's are used then).
	Amount   int64
	Currency string
	// RefundID: the refund of a success that arrived for a period that
	// already had one, or had ended WAIVED or CANCELLED (one per
	// PaymentIntent).
	RefundID string
}

// Of reports whether ref belongs to period p.
func (ref PaymentRef) Of(p Period) bool {
	return ref.AccountID == p.AccountID && ref.SubscriptionID == p.SubscriptionID && ref.BillingDate.Equal(p.BillingDate)
}

// AttemptRef is the reference of PaymentIntent pi made by an attempt on p,
// with p's amount and currency (the attempt's: no change is accepted while
// an attempt is in flight).
func AttemptRef(p Period, pi string) PaymentRef {
	return PaymentRef{PaymentIntent: pi, AccountID: p.AccountID, SubscriptionID: p.SubscriptionID,
		BillingDate: p.BillingDate, Amount: p.Amount, Currency: p.Currency}
}

// ValidID reports whether s can be an account, subscription or SKU id: ids
// become parts of keys, so '#', '/' and whitespace are refused.
func ValidID(s string) bool {
	return s != "" && len(s) <= 128 && !strings.ContainsAny(s, "#\x00/ \t\r\n")
}

// ProcReactivation is the process of the first period a reactivation
// schedules (reference 003: REACTIVATION).
const ProcReactivation Process = "REACTIVATION"

// UpdatedEventReactivated is the history cause of a reactivation
// (reference 003: user-reactivated).
const UpdatedEventReactivated = "user-reactivated"

// NewPeriod is a fresh period record of sub dated d.
func NewPeriod(sub Subscription, d dates.Date, status Status, proc Process, event string, now time.Time) Period {
	return Period{
		AccountID: sub.AccountID, SubscriptionID: sub.SubscriptionID, SKU: sub.SKU, BillingDate: d,
		Term: sub.Term, BillingWeek: sub.BillingWeek, Amount: sub.Amount, Currency: sub.Currency, PaymentDetails: sub.PaymentDetails, Email: sub.Email,
		TestClock: sub.TestClock, Status: status, Process: proc, UpdatedEvent: event, CreatedDate: now,
	}
}

// What Stripe's webhook feed did to a period, in updated_event
// (docs/design.md §8 "Process values are the source document's"): a change
// the feed makes keeps the process of the attempt it is about (FeedProcess)
// and names what happened here. Before 2026-11-28 the feed wrote process
// WEBHOOK with completed, ach-failed and late-success-after-<STATUS>
// (docs/billing.md says how such rows read).
const (
	UpdatedEventACHCompleted = "ach-completed" // a bank debit settled
	UpdatedEventACHReturned  = "ach-returned"  // a bank debit failed or was returned
	UpdatedEventLatePayment  = "late-payment"  // a success for a period that had ended (STALE)
	UpdatedEventRefunded     = "refunded"      // the collected charge was refunded in full
)

// FeedProcess is the process a change by Stripe's feed (or a read of
// Stripe's PaymentIntent) records: the period's own, the attempt's that
// the change is about. WEBHOOK and WEBHOOK_BALANCE are the platform's
// triggers only (collect/triggered.go).
func FeedProcess(p Period) Process {
	if p.Process == "" {
		return ProcNotIdentified
	}
	return p.Process
}
