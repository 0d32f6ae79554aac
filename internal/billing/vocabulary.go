package billing

// The model's vocabulary under the names callers have always used
// (billing.Period, billing.ErrConflict, …): package model holds it, so that
// the billing packages beneath this one (and the store, the charger and the
// notifier) share it without importing the core.

import (
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/billing/collect"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/feed"
	"github.com/stripe-payments/stripe-payments/internal/billing/lifecycle"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/reads"
)

type (
	AttemptQuery       = model.AttemptQuery
	ChargeRequest      = model.ChargeRequest
	ChargeResult       = model.ChargeResult
	Charger            = model.Charger
	Clock              = model.Clock
	ClockMember        = model.ClockMember
	ClockReader        = model.ClockReader
	ClockRun           = model.ClockRun
	ClockStatus        = model.ClockStatus
	Config             = model.Config
	DeclineObserver    = model.DeclineObserver
	DuplicateObserver  = model.DuplicateObserver
	EntryKind          = model.EntryKind
	Erasure            = model.Erasure
	HistoryEntry       = model.HistoryEntry
	Index              = model.Index
	IndexEntry         = model.IndexEntry
	IndexStore         = model.IndexStore
	ListStore          = model.ListStore
	LogNotifier        = model.LogNotifier
	Lookup             = model.Lookup
	LookupBy           = model.LookupBy
	NopObserver        = model.NopObserver
	Notifier           = model.Notifier
	Observer           = model.Observer
	Outcome            = model.Outcome
	Page[T any]        = model.Page[T]
	PaymentDetails     = model.PaymentDetails
	PaymentMethodUsed  = model.PaymentMethodUsed
	PaymentRef         = model.PaymentRef
	Period             = model.Period
	PersonalDataEraser = model.PersonalDataEraser
	PlanObserver       = model.PlanObserver
	Process            = model.Process
	QueuedEraser       = model.QueuedEraser
	Receipt            = model.Receipt
	RecordStore        = model.RecordStore
	Report             = model.Report
	Status             = model.Status
	Store              = model.Store
	SubStatus          = model.SubStatus
	Subscription       = model.Subscription
	Tx                 = model.Tx
	Write              = model.Write
	WriteOp            = model.WriteOp
)

const (
	ACHSent                       = model.ACHSent
	ActionPaymentCompleted        = model.ActionPaymentCompleted
	ActionPaymentFailed           = model.ActionPaymentFailed
	ActionReminderDue             = model.ActionReminderDue
	ByCustomer                    = model.ByCustomer
	ByEmail                       = model.ByEmail
	BySubscription                = model.BySubscription
	Cancelled                     = model.Cancelled
	ClockAdvancing                = model.ClockAdvancing
	ClockFailed                   = model.ClockFailed
	ClockReady                    = model.ClockReady
	Completed                     = model.Completed
	Declined                      = model.Declined
	EntryOther                    = model.EntryOther
	EntryPeriod                   = model.EntryPeriod
	EntrySubscription             = model.EntrySubscription
	ErasureEvent                  = model.ErasureEvent
	Error                         = model.Error
	MaxCauses                     = model.MaxCauses
	MaxUnresolvedSamples          = model.MaxUnresolvedSamples
	MetaAccount                   = model.MetaAccount
	MetaAttempt                   = model.MetaAttempt
	MetaDate                      = model.MetaDate
	MetaSKU                       = model.MetaSKU
	MetaSubscription              = model.MetaSubscription
	OpCheckSubscription           = model.OpCheckSubscription
	OpClaimSubscriptionID         = model.OpClaimSubscriptionID
	OpMoveSubscription            = model.OpMoveSubscription
	OpPutClockMember              = model.OpPutClockMember
	OpPutPaymentRef               = model.OpPutPaymentRef
	OpPutPeriod                   = model.OpPutPeriod
	OpPutReceipt                  = model.OpPutReceipt
	OpPutSubscription             = model.OpPutSubscription
	Paused                        = model.Paused
	PausedSkipped                 = model.PausedSkipped
	PaymentsIndex                 = model.PaymentsIndex
	ProcAdmin                     = model.ProcAdmin
	ProcBatch                     = model.ProcBatch
	ProcWebhookBalance            = model.ProcWebhookBalance
	ProcInitial                   = model.ProcInitial
	ProcManualRepayment           = model.ProcManualRepayment
	ProcNotIdentified             = model.ProcNotIdentified
	ProcPause                     = model.ProcPause
	ProcReactivation              = model.ProcReactivation
	ProcRetry                     = model.ProcRetry
	ProcWebhook                   = model.ProcWebhook
	Processing                    = model.Processing
	Refunded                      = model.Refunded
	RemindersIndex                = model.RemindersIndex
	Scheduled                     = model.Scheduled
	Stale                         = model.Stale
	SubActive                     = model.SubActive
	SubCancelled                  = model.SubCancelled
	SubPaused                     = model.SubPaused
	Succeeded                     = model.Succeeded
	Unknown                       = model.Unknown
	UpdatedEventDuplicateRefunded = model.UpdatedEventDuplicateRefunded
	UpdatedEventACHCompleted      = model.UpdatedEventACHCompleted
	UpdatedEventACHReturned       = model.UpdatedEventACHReturned
	UpdatedEventLatePayment       = model.UpdatedEventLatePayment
	UpdatedEventRefunded          = model.UpdatedEventRefunded
	UpdatedEventPlanChanged       = model.UpdatedEventPlanChanged
	UpdatedEventReactivated       = model.UpdatedEventReactivated
	Waived                        = model.Waived
)

var (
	ErrCannotErase = model.ErrCannotErase
	ErrConflict    = model.ErrConflict
	ErrCrash       = model.ErrCrash
	ErrDuplicate   = model.ErrDuplicate
	ErrLivemode    = model.ErrLivemode
	ErrLocked      = model.ErrLocked
	ErrRetryLater  = model.ErrRetryLater
)

func CancelKey(pi string) string              { return model.CancelKey(pi) }
func DeclineText(code, message string) string { return model.DeclineText(code, message) }
func DedupeKey(a actions.Action) string       { return model.DedupeKey(a) }
func DedupeKeyPrefix(typ, account, sub string) string {
	return model.DedupeKeyPrefix(typ, account, sub)
}
func DefaultConfig() Config                               { return model.DefaultConfig() }
func IdempotencyKey(p Period, n int) string               { return model.IdempotencyKey(p, n) }
func LockKey(accountID string) string                     { return model.LockKey(accountID) }
func MethodOf(pi *stripe.PaymentIntent) PaymentMethodUsed { return model.MethodOf(pi) }
func NewTx(cause string, now time.Time) *Tx               { return model.NewTx(cause, now) }
func RefundKey(pi string) string                          { return model.RefundKey(pi) }
func SupportedCurrency(c string) bool                     { return model.SupportedCurrency(c) }
func ValidID(s string) bool                               { return model.ValidID(s) }

// The parts' own names, under the same roof.
type (
	BatchAttempt    = collect.BatchAttempt
	TriggerResult   = collect.TriggerResult
	TriggeredPeriod = collect.TriggeredPeriod
	BatchCandidate  = collect.BatchCandidate
	BatchResult     = collect.BatchResult
	BatchSelection  = collect.BatchSelection
	InFlightRequest = collect.InFlightRequest
	Resolution      = collect.Resolution
	ResolveOutcome  = collect.ResolveOutcome

	FeedMessage = feed.FeedMessage

	Change       = lifecycle.Change
	CreateInput  = lifecycle.CreateInput
	Reactivation = lifecycle.Reactivation

	PeriodsToWatch = reads.PeriodsToWatch
)

const (
	BatchDeclined         = collect.BatchDeclined
	BatchNothing          = collect.BatchNothing
	BatchPaid             = collect.BatchPaid
	BatchProcessing       = collect.BatchProcessing
	BatchSkippedCancelled = collect.BatchSkippedCancelled
	BatchSkippedInFlight  = collect.BatchSkippedInFlight
	MaxBatchAccounts      = collect.MaxBatchAccounts
	MaxBatchRangeDays     = collect.MaxBatchRangeDays
	ResolveLeft           = collect.ResolveLeft
	ResolveNotInFlight    = collect.ResolveNotInFlight
	ResolveSettled        = collect.ResolveSettled
	ResolveTooYoung       = collect.ResolveTooYoung
	SkipInFlight          = collect.SkipInFlight

	FeedTopic = feed.FeedTopic

	MaxStartMonths = lifecycle.MaxStartMonths
)

var (
	ErrAttemptInFlight = collect.ErrAttemptInFlight
	ErrNothingToPay    = collect.ErrNothingToPay
	ErrNotCancelled    = lifecycle.ErrNotCancelled

	// FeedEventTypes are the Stripe events that feed the billing core.
	FeedEventTypes = feed.FeedEventTypes
)

// IsAttemptKey reports whether s is an attempt's idempotency key.
func IsAttemptKey(s string) bool { return collect.IsAttemptKey(s) }

// FeedFromEvent extracts the feed message of ev (feed.FeedFromEvent).
func FeedFromEvent(ev *stripe.Event) (FeedMessage, bool, error) { return feed.FeedFromEvent(ev) }

// MaxStartDate is the latest start_date of a subscription created on today.
func MaxStartDate(today dates.Date) dates.Date { return lifecycle.MaxStartDate(today) }

// Platform-triggered collections (collect/triggered.go).
const (
	TriggeredPaid           = collect.TriggeredPaid
	TriggeredProcessing     = collect.TriggeredProcessing
	TriggeredDeclined       = collect.TriggeredDeclined
	TriggeredTooSoon        = collect.TriggeredTooSoon
	TriggeredWaitsForMethod = collect.TriggeredWaitsForMethod
	TriggeredInFlight       = collect.TriggeredInFlight
	TriggeredStale          = collect.TriggeredStale
	TriggeredChanged        = collect.TriggeredChanged
	TriggeredFailed         = collect.TriggeredFailed
	TriggerCollected        = collect.TriggerCollected
	TriggerProcessing       = collect.TriggerProcessing
	TriggerDeclined         = collect.TriggerDeclined
	TriggerNotAttempted     = collect.TriggerNotAttempted
	TriggerNothingUnpaid    = collect.TriggerNothingUnpaid
	TriggerUnknownAccount   = collect.TriggerUnknownAccount
	TriggerFailed           = collect.TriggerFailed
)

// TriggerOutcomes lists every TriggerResult.Outcome (the metrics' label set).
var TriggerOutcomes = collect.TriggerOutcomes
