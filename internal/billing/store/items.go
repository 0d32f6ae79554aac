package store

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// Key scheme of BILLING_TABLE (docs/design.md §8; docs/billing.md "Model"):
//
//	subscription    PK=ACC#<account>  SK=SUB#<subscription>#SKU#<sku>
//	billing period  PK=ACC#<account>  SK=PER#<subscription>#<billing date>
//	receipt         PK=ACC#<account>  SK=REC#<processed date>#SKU#<sku>#SUB#<subscription>#<billing date>
//	PI reference    PK=PI#<payment intent>  SK=PI#<payment intent>
//	id claim        PK=ACC#<account>  SK=SID#<subscription>
//
// The receipt key extends the design's REC#<ProcessedDate>#SKU#<SKU> with
// the subscription and billing date: two subscriptions of one SKU, or a retry
// and a regular charge of one subscription, can be processed on the same
// day. begins_with(SK, "REC#") and date ordering are unchanged.
const (
	prefixAccount = "ACC#"
	prefixSub     = "SUB#"
	prefixPeriod  = "PER#"
	prefixReceipt = "REC#"
	prefixPI      = "PI#"
	prefixID      = "SID#"

	// NeverSentinel is the GSI sort value of a subscription that was never
	// paid (or never reminded): a sparse index needs both key attributes, so
	// a brand-new subscription without LastPaymentDate carries this instead
	// and is still in the payments index. It sorts before every real date.
	NeverSentinel = "0000-00-00"

	timeLayout = time.RFC3339Nano
)

func accountPK(account string) string { return prefixAccount + account }

func subSK(sub, sku string) string { return prefixSub + sub + "#SKU#" + sku }

func periodSK(sub string, d dates.Date) string { return prefixPeriod + sub + "#" + d.String() }

func receiptSK(r model.Receipt) string {
	return prefixReceipt + r.ProcessedDate.String() + "#SKU#" + r.SKU + "#SUB#" + r.SubscriptionID + "#" + r.BillingDate.String()
}

// idSK keys the claim of a subscription id in its account: the
// subscription's own key names its SKU, so two creates of one id with two
// SKUs would both succeed without it.
func idSK(sub string) string { return prefixID + sub }

func piKey(pi string) string { return prefixPI + pi }

func historyPK(account, sub string) string { return accountPK(account) + "#SUB#" + sub }

// historySK keys an entry by the billing date and the period version its
// change produced. Period records are never deleted (a period replaced by a
// rule change stays as CANCELLED, and comes back at its next version if the
// rule brings its date back), so versions never repeat; the entry is written
// in the change's own transaction, conditioned on its key not existing: a
// change that fails writes no entry, and no write ever replaces one.
func historySK(e model.HistoryEntry) string {
	return fmt.Sprintf("%s#%06d", e.BillingDate, e.Version)
}

// Shard is the write shard of an account: every index entry of an account
// lands in the same shard, so one worker per shard sees all of an account's
// due items together and takes its lock once.
func Shard(account string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(account))
	return int(h.Sum32() % uint32(shards))
}

// Partition is a sharded GSI partition value: "<date>#<shard>".
func Partition(d dates.Date, shard int) string { return fmt.Sprintf("%s#%d", d, shard) }

// indexPartition is the GSI partition of an entry due on d: Partition for
// real time; "<clock>#<date>#0" for a test clock's subscriptions, so that
// the real-time jobs never read them and a clock's advance reads only its
// own (one shard: a clock holds a handful of subscriptions).
func indexPartition(clock string, d dates.Date, shard int) string {
	if clock != "" {
		return clock + "#" + Partition(d, 0)
	}
	return Partition(d, shard)
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, _ := time.Parse(timeLayout, s)
	return t
}

func parseDate(s string) dates.Date {
	d, _ := dates.ParseOptional(s)
	return d
}

func orSentinel(d dates.Date) string {
	if d.IsZero() {
		return NeverSentinel
	}
	return d.String()
}

// subItem is the stored subscription.
type subItem struct {
	PK               string               `dynamodbav:"PK"`
	SK               string               `dynamodbav:"SK"`
	Type             string               `dynamodbav:"Type"`
	AccountID        string               `dynamodbav:"AccountId"`
	SubscriptionID   string               `dynamodbav:"SubscriptionId"`
	SKU              string               `dynamodbav:"SKU"`
	Email            string               `dynamodbav:"Email"`
	PaymentDay       int                  `dynamodbav:"PaymentDay"`
	BillingWeek      int                  `dynamodbav:"BillingWeek,omitempty"`
	PaymentAmount    int64                `dynamodbav:"PaymentAmount"`
	Currency         string               `dynamodbav:"Currency"`
	Term             string               `dynamodbav:"Term"`
	Timezone         string               `dynamodbav:"Timezone,omitempty"`
	PaymentDetails   model.PaymentDetails `dynamodbav:"PaymentDetails"`
	Status           string               `dynamodbav:"Status"`
	TestClock        string               `dynamodbav:"TestClock,omitempty"`
	StartDate        string               `dynamodbav:"StartDate,omitempty"`
	NextPeriodDate   string               `dynamodbav:"NextPeriodDate,omitempty"`
	DueDate          string               `dynamodbav:"DueDate,omitempty"`
	NextPaymentDate  string               `dynamodbav:"NextPaymentDate,omitempty"`
	NextReminderDate string               `dynamodbav:"NextReminderDate,omitempty"`
	RemindFor        string               `dynamodbav:"RemindFor,omitempty"`
	LastPaymentDate  string               `dynamodbav:"LastPaymentDate,omitempty"`
	LastReminderDate string               `dynamodbav:"LastReminderDate,omitempty"`
	LastCharged      string               `dynamodbav:"LastChargedPeriod,omitempty"`
	ReminderPending  string               `dynamodbav:"ReminderPending,omitempty"`
	PausedFrom       string               `dynamodbav:"PausedFrom,omitempty"`
	PausedUntil      string               `dynamodbav:"PausedUntil,omitempty"`
	PauseMonths      int                  `dynamodbav:"PauseMonths,omitempty"`
	PendingDowngrade bool                 `dynamodbav:"PendingDowngrade,omitempty"`
	CreatedAt        string               `dynamodbav:"CreatedAt"`
	UpdatedAt        string               `dynamodbav:"UpdatedAt"`
	Version          int64                `dynamodbav:"Version"`
	GSI1PK           string               `dynamodbav:"GSI1PK,omitempty"`
	GSI1SK           string               `dynamodbav:"GSI1SK,omitempty"`
	GSI2PK           string               `dynamodbav:"GSI2PK,omitempty"`
	GSI2SK           string               `dynamodbav:"GSI2SK,omitempty"`
}

// toSubItem renders s; the index keys follow from its state: an ACTIVE or
// PAUSED subscription is in the payments index on its due date (a paused
// one, so that its PAUSED periods become PAUSED_SKIPPED as their dates
// pass) and in the reminders index on its next reminder.
func toSubItem(s model.Subscription, shards int) subItem {
	it := subItem{
		PK: accountPK(s.AccountID), SK: subSK(s.SubscriptionID, s.SKU), Type: "SUB",
		AccountID: s.AccountID, SubscriptionID: s.SubscriptionID, SKU: s.SKU, Email: s.Email,
		PaymentDay: s.PaymentDay, BillingWeek: s.BillingWeek, PaymentAmount: s.Amount, Currency: s.Currency,
		Term: string(s.Term), Timezone: s.Timezone, PaymentDetails: s.PaymentDetails, Status: string(s.Status),
		TestClock: s.TestClock, StartDate: s.StartDate.String(), NextPeriodDate: s.NextPeriodDate.String(), DueDate: s.DueDate.String(),
		NextPaymentDate: s.NextPaymentDate.String(), NextReminderDate: s.NextReminderDate.String(),
		RemindFor: s.RemindFor.String(), LastPaymentDate: s.LastPaymentDate.String(),
		LastReminderDate: s.LastReminderDate.String(), LastCharged: s.LastChargedPeriod.String(),
		ReminderPending: s.ReminderPending.String(),
		PausedFrom:      s.PausedFrom.String(), PausedUntil: s.PausedUntil.String(), PauseMonths: s.PauseMonths,
		PendingDowngrade: s.PendingDowngrade,
		CreatedAt:        formatTime(s.CreatedAt), UpdatedAt: formatTime(s.UpdatedAt), Version: s.Version,
	}
	if s.Status == model.SubActive || s.Status == model.SubPaused {
		shard := Shard(s.AccountID, shards)
		if !s.NextReminderDate.IsZero() {
			it.GSI1PK, it.GSI1SK = indexPartition(s.TestClock, s.NextReminderDate, shard), orSentinel(s.LastReminderDate)
		}
		if !s.DueDate.IsZero() {
			it.GSI2PK, it.GSI2SK = indexPartition(s.TestClock, s.DueDate, shard), orSentinel(s.LastPaymentDate)
		}
	}
	return it
}

func (it subItem) subscription() model.Subscription {
	sub := model.Subscription{
		AccountID: it.AccountID, SubscriptionID: it.SubscriptionID, SKU: it.SKU, Email: it.Email,
		PaymentDay: it.PaymentDay, BillingWeek: it.BillingWeek, Amount: it.PaymentAmount, Currency: it.Currency,
		Term: dates.Term(it.Term), Timezone: it.Timezone, PaymentDetails: it.PaymentDetails, Status: model.SubStatus(it.Status),
		TestClock: it.TestClock, StartDate: parseDate(it.StartDate), NextPeriodDate: parseDate(it.NextPeriodDate), DueDate: parseDate(it.DueDate),
		NextPaymentDate: parseDate(it.NextPaymentDate), NextReminderDate: parseDate(it.NextReminderDate),
		RemindFor: parseDate(it.RemindFor), LastPaymentDate: parseDate(it.LastPaymentDate),
		LastReminderDate: parseDate(it.LastReminderDate), LastChargedPeriod: parseDate(it.LastCharged),
		ReminderPending: parseDate(it.ReminderPending),
		PausedFrom:      parseDate(it.PausedFrom), PausedUntil: parseDate(it.PausedUntil), PauseMonths: it.PauseMonths,
		PendingDowngrade: it.PendingDowngrade,
		CreatedAt:        parseTime(it.CreatedAt), UpdatedAt: parseTime(it.UpdatedAt), Version: it.Version,
	}
	// Items written before the cursor existed: the next payment was the
	// next period, unmoved.
	if sub.NextPeriodDate.IsZero() {
		sub.NextPeriodDate = sub.NextPaymentDate
	}
	if sub.DueDate.IsZero() {
		sub.DueDate = sub.NextPaymentDate
	}
	return sub
}

// periodItem is the stored billing period.
type periodItem struct {
	PK                  string               `dynamodbav:"PK"`
	SK                  string               `dynamodbav:"SK"`
	Type                string               `dynamodbav:"Type"`
	AccountID           string               `dynamodbav:"AccountId"`
	SubscriptionID      string               `dynamodbav:"SubscriptionId"`
	SKU                 string               `dynamodbav:"SKU"`
	BillingDate         string               `dynamodbav:"BillingDate"`
	ChargeDate          string               `dynamodbav:"ChargeDate,omitempty"`
	Term                string               `dynamodbav:"Term,omitempty"`
	BillingWeek         int                  `dynamodbav:"BillingWeek,omitempty"`
	PaymentAmount       int64                `dynamodbav:"PaymentAmount"`
	Currency            string               `dynamodbav:"Currency"`
	PaymentDetails      model.PaymentDetails `dynamodbav:"PaymentDetails"`
	Email               string               `dynamodbav:"Email"`
	TestClock           string               `dynamodbav:"TestClock,omitempty"`
	BillingStatus       string               `dynamodbav:"BillingStatus"`
	Process             string               `dynamodbav:"Process"`
	UpdatedEvent        string               `dynamodbav:"UpdatedEvent,omitempty"`
	TransactionID       string               `dynamodbav:"TransactionId,omitempty"`
	Error               string               `dynamodbav:"Error,omitempty"`
	DeclineCode         string               `dynamodbav:"DeclineCode,omitempty"`
	NotRetried          bool                 `dynamodbav:"NotRetried,omitempty"`
	HardDeclinedMethod  string               `dynamodbav:"HardDeclinedMethod,omitempty"`
	TriggeredAt         string               `dynamodbav:"TriggeredAt,omitempty"`
	Attempts            int                  `dynamodbav:"Attempts"`
	InFlightKey         string               `dynamodbav:"InFlightKey,omitempty"`
	InFlightAt          string               `dynamodbav:"InFlightAt,omitempty"`
	InFlightSent        string               `dynamodbav:"InFlightSent,omitempty"`
	NextAttemptDate     string               `dynamodbav:"NextAttemptDate,omitempty"`
	PauseDurationMonths int                  `dynamodbav:"PauseDurationMonths,omitempty"`
	CreatedDate         string               `dynamodbav:"CreatedDate"`
	InitialRunDate      string               `dynamodbav:"InitialRunDate,omitempty"`
	LastRunDate         string               `dynamodbav:"LastRunDate,omitempty"`
	CompletionDate      string               `dynamodbav:"CompletionDate,omitempty"`
	Version             int64                `dynamodbav:"Version"`
	GSI2PK              string               `dynamodbav:"GSI2PK,omitempty"`
	GSI2SK              string               `dynamodbav:"GSI2SK,omitempty"`
}

// toPeriodItem renders p; a period is in the payments index while a job has
// to come back to it (an ERROR awaiting its retry or stale mark).
func toPeriodItem(p model.Period, shards int) periodItem {
	it := periodItem{
		PK: accountPK(p.AccountID), SK: periodSK(p.SubscriptionID, p.BillingDate), Type: "PER",
		AccountID: p.AccountID, SubscriptionID: p.SubscriptionID, SKU: p.SKU, BillingDate: p.BillingDate.String(),
		ChargeDate: p.ChargeDate.String(), Term: string(p.Term), BillingWeek: p.BillingWeek, PaymentAmount: p.Amount, Currency: p.Currency, PaymentDetails: p.PaymentDetails, Email: p.Email,
		TestClock: p.TestClock, BillingStatus: string(p.Status), Process: string(p.Process), UpdatedEvent: p.UpdatedEvent,
		TransactionID: p.TransactionID, Error: p.Error, DeclineCode: p.DeclineCode, NotRetried: p.NotRetried, Attempts: p.Attempts,
		InFlightKey: p.InFlightKey, InFlightAt: formatTime(p.InFlightAt), InFlightSent: formatTime(p.InFlightSent),
		HardDeclinedMethod: p.HardDeclinedMethod, TriggeredAt: formatTime(p.TriggeredAt),
		NextAttemptDate: p.NextAttemptDate.String(), PauseDurationMonths: p.PauseDurationMonths,
		CreatedDate: formatTime(p.CreatedDate), InitialRunDate: formatTime(p.InitialRunDate), LastRunDate: formatTime(p.LastRunDate),
		CompletionDate: formatTime(p.CompletionDate), Version: p.Version,
	}
	if p.Status == model.Error && !p.NextAttemptDate.IsZero() {
		it.GSI2PK, it.GSI2SK = indexPartition(p.TestClock, p.NextAttemptDate, Shard(p.AccountID, shards)), it.SK
	}
	return it
}

func (it periodItem) period() model.Period {
	return model.Period{
		AccountID: it.AccountID, SubscriptionID: it.SubscriptionID, SKU: it.SKU, BillingDate: parseDate(it.BillingDate),
		ChargeDate: parseDate(it.ChargeDate), Term: dates.Term(it.Term), BillingWeek: it.BillingWeek, Amount: it.PaymentAmount, Currency: it.Currency, PaymentDetails: it.PaymentDetails, Email: it.Email,
		TestClock: it.TestClock, Status: model.Status(it.BillingStatus), Process: model.Process(it.Process), UpdatedEvent: it.UpdatedEvent,
		TransactionID: it.TransactionID, Error: it.Error, DeclineCode: it.DeclineCode, NotRetried: it.NotRetried, Attempts: it.Attempts,
		InFlightKey: it.InFlightKey, InFlightAt: parseTime(it.InFlightAt), InFlightSent: parseTime(it.InFlightSent),
		HardDeclinedMethod: it.HardDeclinedMethod, TriggeredAt: parseTime(it.TriggeredAt),
		NextAttemptDate: parseDate(it.NextAttemptDate), PauseDurationMonths: it.PauseDurationMonths,
		CreatedDate: parseTime(it.CreatedDate), InitialRunDate: parseTime(it.InitialRunDate), LastRunDate: parseTime(it.LastRunDate),
		CompletionDate: parseTime(it.CompletionDate), Version: it.Version,
	}
}

// receiptItem is the stored receipt; TTL is Unix seconds.
type receiptItem struct {
	PK              string `dynamodbav:"PK"`
	SK              string `dynamodbav:"SK"`
	Type            string `dynamodbav:"Type"`
	AccountID       string `dynamodbav:"AccountId"`
	SubscriptionID  string `dynamodbav:"SubscriptionId"`
	SKU             string `dynamodbav:"SKU"`
	ProcessedDate   string `dynamodbav:"ProcessedDate"`
	BillingDate     string `dynamodbav:"BillingDate"`
	ProcessedAmount int64  `dynamodbav:"ProcessedAmount"`
	Currency        string `dynamodbav:"Currency"`
	PaymentIntent   string `dynamodbav:"PaymentIntent"`
	// The receipt_payment_type and receipt_account_mask of reference 003.
	PaymentMethodType  string `dynamodbav:"PaymentMethodType,omitempty"`
	PaymentMethodLast4 string `dynamodbav:"PaymentMethodLast4,omitempty"`
	TTL                int64  `dynamodbav:"TTL"`
}

func toReceiptItem(r model.Receipt) receiptItem {
	return receiptItem{
		PK: accountPK(r.AccountID), SK: receiptSK(r), Type: "REC", AccountID: r.AccountID,
		SubscriptionID: r.SubscriptionID, SKU: r.SKU, ProcessedDate: r.ProcessedDate.String(),
		BillingDate: r.BillingDate.String(), ProcessedAmount: r.Amount, Currency: r.Currency,
		PaymentIntent: r.PaymentIntent, PaymentMethodType: r.PaymentMethodType, PaymentMethodLast4: r.PaymentMethodLast4,
		TTL: r.ExpiresAt.Unix(),
	}
}

func (it receiptItem) receipt() model.Receipt {
	return model.Receipt{
		AccountID: it.AccountID, SubscriptionID: it.SubscriptionID, SKU: it.SKU,
		ProcessedDate: parseDate(it.ProcessedDate), BillingDate: parseDate(it.BillingDate),
		Amount: it.ProcessedAmount, Currency: it.Currency, PaymentIntent: it.PaymentIntent,
		PaymentMethodType: it.PaymentMethodType, PaymentMethodLast4: it.PaymentMethodLast4,
		ExpiresAt: time.Unix(it.TTL, 0).UTC(),
	}
}

type piItem struct {
	PK             string `dynamodbav:"PK"`
	SK             string `dynamodbav:"SK"`
	Type           string `dynamodbav:"Type"`
	PaymentIntent  string `dynamodbav:"PaymentIntent"`
	AccountID      string `dynamodbav:"AccountId"`
	SubscriptionID string `dynamodbav:"SubscriptionId"`
	BillingDate    string `dynamodbav:"BillingDate"`
	// The attempt that created the PaymentIntent: its amount and currency
	// (absent on references written before they were recorded), and the
	// refund of a duplicate success.
	Amount   int64  `dynamodbav:"Amount,omitempty"`
	Currency string `dynamodbav:"Currency,omitempty"`
	RefundID string `dynamodbav:"RefundId,omitempty"`
}

// idItem claims a subscription id in its account (written once, by the
// create, with attribute_not_exists; never read but by that condition).
type idItem struct {
	PK             string `dynamodbav:"PK"`
	SK             string `dynamodbav:"SK"`
	Type           string `dynamodbav:"Type"`
	SubscriptionID string `dynamodbav:"SubscriptionId"`
	SKU            string `dynamodbav:"SKU"`
}

// historyItem is the stored history entry.
type historyItem struct {
	PK             string `dynamodbav:"PK"`
	SK             string `dynamodbav:"SK"`
	AccountID      string `dynamodbav:"AccountId"`
	SubscriptionID string `dynamodbav:"SubscriptionId"`
	BillingDate    string `dynamodbav:"BillingDate"`
	BillingStatus  string `dynamodbav:"BillingStatus"`
	Process        string `dynamodbav:"Process"`
	UpdatedEvent   string `dynamodbav:"UpdatedEvent,omitempty"`
	LastRunDate    string `dynamodbav:"LastRunDate"`
	TransactionID  string `dynamodbav:"TransactionId,omitempty"`
	Error          string `dynamodbav:"Error,omitempty"`
	Amount         int64  `dynamodbav:"Amount"`
	Attempts       int    `dynamodbav:"Attempts"`
	Version        int64  `dynamodbav:"Version"`
	Cause          string `dynamodbav:"Cause"`
}

func toHistoryItem(e model.HistoryEntry) historyItem {
	return historyItem{
		PK: historyPK(e.AccountID, e.SubscriptionID), SK: historySK(e), AccountID: e.AccountID,
		SubscriptionID: e.SubscriptionID, BillingDate: e.BillingDate.String(), BillingStatus: string(e.Status),
		Process: string(e.Process), UpdatedEvent: e.UpdatedEvent, LastRunDate: formatTime(e.LastRunDate),
		TransactionID: e.TransactionID, Error: e.Error, Amount: e.Amount, Attempts: e.Attempts,
		Version: e.Version, Cause: e.Cause,
	}
}

func (it historyItem) entry() model.HistoryEntry {
	return model.HistoryEntry{
		AccountID: it.AccountID, SubscriptionID: it.SubscriptionID, BillingDate: parseDate(it.BillingDate),
		Status: model.Status(it.BillingStatus), Process: model.Process(it.Process), UpdatedEvent: it.UpdatedEvent,
		LastRunDate: parseTime(it.LastRunDate), TransactionID: it.TransactionID, Error: it.Error,
		Amount: it.Amount, Attempts: it.Attempts, Version: it.Version, Cause: it.Cause,
	}
}
