// Package billingtest runs the billing core in tests: a service on fresh
// DynamoDB Local tables and the fake Stripe (NewEnv), a settable clock, a
// notifier that records actions once per dedupe key, and crash injection by
// decorating the service's store and charger (Crasher).
package billingtest

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// Crasher injects crashes between the steps of a collection attempt by
// decorating the service's store and charger; the production service has
// no hooks. Step is asked at each step of every attempt and returns
// billing.ErrCrash to make the process die there (nil: go on):
//
//   - "claimed": the attempt's claim is committed (or, for an attempt in
//     flight that is resent, nothing is done yet), before the charge;
//   - "charged": Stripe answered the charge (or, for a resent attempt whose
//     answer was lost again, the lookup found its PaymentIntent), before
//     anything is recorded;
//   - "committed": the attempt's outcome is committed.
//
// At "claimed" and "committed" p is the period as written; at a step met
// in the charger it carries what the charge names (account, subscription,
// billing date, SKU, amount, payment details, idempotency key).
//
// A crash is the decorated call failing with billing.ErrCrash, after the
// store's commit or Stripe's answer when the step follows one: the service
// then stops the job and abandons the account's lock, as a dead process
// would leave it. The calls the dead attempt would still make (the lookup
// of a resent attempt's PaymentIntent) fail too.
type Crasher struct {
	Step func(step string, p billing.Period) error
	// Now and Window tell a lookup that follows a failed resend (within
	// Stripe's idempotency window of the attempt) from one that resolves
	// an attempt past it: only the former is part of the attempt's
	// "charged" step.
	Now    func() time.Time
	Window time.Duration

	mu      sync.Mutex
	claimed map[string]bool // idempotency keys past "claimed" at the commit
	dead    map[string]bool // attempts that died in the charger
}

func (c *Crasher) step(name string, p billing.Period) error {
	if c == nil || c.Step == nil {
		return nil
	}
	return c.Step(name, p)
}

// Store decorates s: a commit that claims an attempt or records its outcome
// is followed by the "claimed" or "committed" step.
func (c *Crasher) Store(s billing.Store) billing.Store { return crashStore{Store: s, c: c} }

// Charger decorates ch: a charge is preceded by "claimed" (unless its claim
// passed that step already) and followed by "charged".
func (c *Crasher) Charger(ch billing.Charger) billing.Charger {
	return crashCharger{Charger: ch, c: c}
}

type crashStore struct {
	billing.Store
	c *Crasher
}

func (s crashStore) Commit(ctx context.Context, tx *billing.Tx) error {
	if err := s.Store.Commit(ctx, tx); err != nil {
		return err
	}
	if p, ok := claimOf(tx); ok {
		if err := s.c.step("claimed", p); err != nil {
			return err
		}
		s.c.mu.Lock()
		if s.c.claimed == nil {
			s.c.claimed = map[string]bool{}
		}
		s.c.claimed[p.InFlightKey] = true // its charge follows: the step is passed
		s.c.mu.Unlock()
		return nil
	}
	if p, ok := recordOf(tx); ok {
		return s.c.step("committed", p)
	}
	return nil
}

// claimOf: tx claims an attempt (collect.go attempt: the subscription
// checked, the period marked in flight without a history entry).
func claimOf(tx *billing.Tx) (billing.Period, bool) {
	if tx.Cause() != "claim" || len(tx.History()) != 0 {
		return billing.Period{}, false
	}
	for _, w := range tx.Writes() {
		if w.Op == billing.OpPutPeriod && w.Period.InFlightKey != "" {
			return w.Period, true
		}
	}
	return billing.Period{}, false
}

var attemptCause = regexp.MustCompile(`^(collect|resolve):[^:]+:attempt-(\d+)$`)

// recordOf: tx records the outcome of attempt n of a period (collect.go
// record, caused "collect:<day>:attempt-<n>" or "resolve:…"): the period
// written with n attempts, and not as an attempt given up on (a lost
// attempt or a stale mark, whose writes share the cause).
func recordOf(tx *billing.Tx) (billing.Period, bool) {
	m := attemptCause.FindStringSubmatch(tx.Cause())
	if m == nil {
		return billing.Period{}, false
	}
	n, _ := strconv.Atoi(m[2])
	for _, w := range tx.Writes() {
		p := w.Period
		if w.Op == billing.OpPutPeriod && p.Attempts == n && p.InFlightKey == "" &&
			p.UpdatedEvent != "attempt-lost" && p.UpdatedEvent != "stale" {
			return p, true
		}
	}
	return billing.Period{}, false
}

type crashCharger struct {
	billing.Charger
	c *Crasher
}

func (ch crashCharger) Charge(ctx context.Context, req billing.ChargeRequest) (billing.ChargeResult, error) {
	p := requested(req)
	attempt := attemptKey(req.Metadata)
	c := ch.c
	c.mu.Lock()
	delete(c.dead, attempt)
	passed := c.claimed[req.IdempotencyKey]
	delete(c.claimed, req.IdempotencyKey)
	c.mu.Unlock()
	if !passed {
		if err := c.step("claimed", p); err != nil {
			c.kill(attempt)
			return billing.ChargeResult{}, err
		}
	}
	res, err := ch.Charger.Charge(ctx, req)
	if err != nil {
		return res, err
	}
	if err := c.step("charged", p); err != nil {
		c.kill(attempt)
		return billing.ChargeResult{}, err
	}
	return res, nil
}

// FindAttempt: the lookup that follows a failed resend belongs to the
// attempt: it dies with it, and a find is the attempt's "charged" step.
func (ch crashCharger) FindAttempt(ctx context.Context, q billing.AttemptQuery) (billing.Lookup, error) {
	c := ch.c
	attempt := attemptKey(q.Metadata)
	resend := c.Now != nil && !c.Now().After(q.Since.Add(c.Window))
	c.mu.Lock()
	died := c.dead[attempt]
	delete(c.dead, attempt)
	c.mu.Unlock()
	if died && resend {
		return billing.Lookup{}, billing.ErrCrash
	}
	lk, err := ch.Charger.FindAttempt(ctx, q)
	if err != nil || !lk.Found || !resend {
		return lk, err
	}
	p := billing.Period{AccountID: q.Metadata[billing.MetaAccount], SubscriptionID: q.Metadata[billing.MetaSubscription],
		BillingDate: parseDate(q.Metadata[billing.MetaDate]), SKU: q.Metadata[billing.MetaSKU], Amount: q.Amount, Currency: q.Currency,
		PaymentDetails: billing.PaymentDetails{Customer: q.Customer, StripeAccount: q.StripeAccount}}
	if err := c.step("charged", p); err != nil {
		return billing.Lookup{}, err
	}
	return lk, nil
}

func (c *Crasher) kill(attempt string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead == nil {
		c.dead = map[string]bool{}
	}
	c.dead[attempt] = true
}

// attemptKey names one attempt by the metadata the service sets on it.
func attemptKey(m map[string]string) string {
	return m[billing.MetaAccount] + "/" + m[billing.MetaSubscription] + "/" + m[billing.MetaDate] + "/" + m[billing.MetaAttempt]
}

// requested is the period a charge request names.
func requested(req billing.ChargeRequest) billing.Period {
	n, _ := strconv.Atoi(req.Metadata[billing.MetaAttempt])
	return billing.Period{AccountID: req.Metadata[billing.MetaAccount], SubscriptionID: req.Metadata[billing.MetaSubscription],
		BillingDate: parseDate(req.Metadata[billing.MetaDate]), SKU: req.Metadata[billing.MetaSKU],
		Amount: req.Amount, Currency: req.Currency, Attempts: max(n-1, 0), InFlightKey: req.IdempotencyKey,
		PaymentDetails: billing.PaymentDetails{Customer: req.Customer, PaymentMethod: req.PaymentMethod, StripeAccount: req.StripeAccount}}
}

func parseDate(s string) dates.Date {
	d, _ := dates.ParseOptional(s)
	return d
}
