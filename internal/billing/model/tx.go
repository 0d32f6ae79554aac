package model

import (
	"strings"
	"time"
)

// Tx collects the writes of one logical change and its history entries, in
// the model's terms; Store.Commit applies them all or nothing (one DynamoDB
// transaction in internal/billing/store), so the history holds exactly the
// changes that happened. Every write of a subscription or period is
// conditioned on the version it was read at (optimistic concurrency): a
// failed Commit (ErrConflict) means re-read before retrying.
type Tx struct {
	cause   string
	now     time.Time
	writes  []Write
	history []HistoryEntry
}

// WriteOp is the kind of one write of a Tx.
type WriteOp int

const (
	// OpPutSubscription writes Subscription if the stored item is still at
	// Expect (0: it must not exist).
	OpPutSubscription WriteOp = iota + 1
	// OpCheckSubscription writes nothing; the change fails unless the
	// stored subscription is still at Expect and not CANCELLED.
	OpCheckSubscription
	// OpPutPeriod writes Period if the stored item is still at Expect (0:
	// it must not exist).
	OpPutPeriod
	// OpPutReceipt adds Receipt; it must not exist.
	OpPutReceipt
	// OpPutPaymentRef records PaymentRef (unconditional).
	OpPutPaymentRef
	// OpPutClockMember records that Subscription lives on its test clock
	// (unconditional).
	OpPutClockMember
	// OpClaimSubscriptionID claims Subscription's id in its account; the
	// change fails (ErrConflict) when the id is claimed already, whatever
	// the SKU: the period keys (PER#<subscription>#<date>) do not name the
	// SKU, so one id must be one subscription.
	OpClaimSubscriptionID
)

// Write is one write of a Tx: Op says which of the values it carries. The
// values are copies taken when the write was added.
type Write struct {
	Op           WriteOp
	Expect       int64
	Subscription Subscription
	Period       Period
	Receipt      Receipt
	PaymentRef   PaymentRef
	// FromSKU: the SKU the subscription was stored under
	// (OpMoveSubscription, plan.go).
	FromSKU string
}

// NewTx starts a change made by cause at now.
func NewTx(cause string, now time.Time) *Tx {
	return &Tx{cause: sanitizeCause(cause), now: now}
}

func sanitizeCause(c string) string {
	c = strings.NewReplacer("#", "_", " ", "_").Replace(c)
	if len(c) > 200 {
		c = c[:200]
	}
	return c
}

// Cause names what made the change (sanitized: no '#', no spaces).
func (tx *Tx) Cause() string { return tx.cause }

// Now is the time of the change.
func (tx *Tx) Now() time.Time { return tx.now }

// Writes are the writes in the order they were added.
func (tx *Tx) Writes() []Write { return tx.writes }

// History are the history entries the change appends.
func (tx *Tx) History() []HistoryEntry { return tx.history }

// PutSubscription writes sub if it is still at sub.Version (0: creates it)
// and advances sub.Version. After a failed Commit, re-read before retrying.
func (tx *Tx) PutSubscription(sub *Subscription) {
	expect := sub.Version
	sub.Version++
	sub.UpdatedAt = tx.now
	tx.writes = append(tx.writes, Write{Op: OpPutSubscription, Expect: expect, Subscription: *sub})
}

// CheckSubscription makes the change conditional on sub being unchanged
// since it was read and not CANCELLED, without writing it.
func (tx *Tx) CheckSubscription(sub Subscription) {
	tx.writes = append(tx.writes, Write{Op: OpCheckSubscription, Expect: sub.Version, Subscription: sub})
}

// PutPeriod writes p at its next version and appends a history entry for
// the change, unless quiet (bookkeeping that changes nothing a reader of the
// history cares about, such as marking an attempt in flight).
func (tx *Tx) PutPeriod(p *Period, quiet bool) {
	expect := p.Version
	p.Version++
	p.LastRunDate = tx.now
	tx.writes = append(tx.writes, Write{Op: OpPutPeriod, Expect: expect, Period: *p})
	if quiet {
		return
	}
	tx.history = append(tx.history, HistoryEntry{
		AccountID: p.AccountID, SubscriptionID: p.SubscriptionID, BillingDate: p.BillingDate,
		Status: p.Status, Process: p.Process, UpdatedEvent: p.UpdatedEvent, LastRunDate: tx.now,
		TransactionID: p.TransactionID, Error: p.Error, Amount: p.Amount, Attempts: p.Attempts,
		Version: p.Version, Cause: tx.cause,
	})
}

// PutReceipt adds a receipt; it must not exist.
func (tx *Tx) PutReceipt(r Receipt) {
	tx.writes = append(tx.writes, Write{Op: OpPutReceipt, Receipt: r})
}

// PutPaymentRef records which period a PaymentIntent belongs to.
func (tx *Tx) PutPaymentRef(ref PaymentRef) {
	tx.writes = append(tx.writes, Write{Op: OpPutPaymentRef, PaymentRef: ref})
}

// PutClockMember records that sub lives on its test clock, in tx.
func (tx *Tx) PutClockMember(sub Subscription) {
	tx.writes = append(tx.writes, Write{Op: OpPutClockMember, Subscription: sub})
}

// ClaimSubscriptionID makes the change claim sub's id in its account: it
// fails when another create claimed it (any SKU).
func (tx *Tx) ClaimSubscriptionID(sub Subscription) {
	tx.writes = append(tx.writes, Write{Op: OpClaimSubscriptionID, Subscription: sub})
}

// Empty reports whether the change writes nothing.
func (tx *Tx) Empty() bool { return len(tx.writes) == 0 }
