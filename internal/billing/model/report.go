package model

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
)

// Report summarises one job run.
type Report struct {
	Job  string `json:"job"`
	Date string `json:"date"`
	// Entries read from the index partitions.
	Entries int `json:"entries"`
	// Reminded: reminders sent.
	Reminded int `json:"reminded"`
	// Attempts answered by Stripe, by outcome.
	Succeeded  int `json:"succeeded"`
	Processing int `json:"processing"`
	Declined   int `json:"declined"`
	// Stale: periods given up on; PausedSkipped: paused periods whose date
	// came; Resumed: pauses ended (after their last skipped period).
	Stale         int `json:"stale"`
	PausedSkipped int `json:"paused_skipped"`
	Resumed       int `json:"resumed"`
	// Skipped: entries with nothing to do (stale index reads, not due).
	Skipped int `json:"skipped"`
	// PaidByCustomer: periods not charged because the cancel before the
	// attempt found their earlier PaymentIntent paid by the customer.
	PaidByCustomer int `json:"paid_by_customer,omitempty"`
	// Locked: accounts whose lock another holder kept for the whole run.
	Locked int `json:"locked"`
	// Unknown: charges of this run that got no trustworthy answer.
	Unknown int `json:"unknown"`
	// Resolved: attempts whose unknown outcome this run settled by asking
	// Stripe (found and recorded, or not found and recorded as lost).
	Resolved int `json:"resolved"`
	// Unresolved: periods this run left with an attempt whose outcome is
	// still unknown (internal/billing/collect/resolve.go); the next run settles them. Not OK.
	Unresolved int `json:"unresolved"`
	// UnresolvedSamples names up to MaxUnresolvedSamples of those periods,
	// "<account>/<subscription_id>", for the operator (the incident of
	// unknown outcomes shows them).
	UnresolvedSamples []string `json:"unresolved_samples,omitempty"`
	// SweptFrom: the oldest index partition this run read (collect: the
	// sweep watermark reaches back past the lookback after an outage).
	SweptFrom string `json:"swept_from,omitempty"`
	// Errors: entries that failed otherwise (see the logs).
	Errors int `json:"errors"`
	// Causes: why the run was not OK, in words (the first few distinct
	// ones: "Stripe unreachable: …"), for a test clock's page and the logs.
	Causes []string `json:"causes,omitempty"`
	// Queue: the run went through the billing queue (collect/queued.go).
	Queue *QueueRun `json:"queue,omitempty"`

	// chargedOn: the Stripe accounts this run charged on, registered for
	// the poller at the end (subscriptions created before the registry).
	chargedOn map[string]bool
	// causeRoots: the innermost errors of Causes (because).
	causeRoots map[string]bool

	mu sync.Mutex
}

// QueueRun is what a queued collection run did in the process that ran it
// (Report.Queue).
type QueueRun struct {
	// Run is the queued run's id: its progress across replicas is
	// GET /internal/v1/billing/queue-runs/{id} and the console's runs page.
	Run string `json:"run"`
	// Enqueued: messages sent (one per account with something due).
	Enqueued int `json:"enqueued"`
	// Joined: a run of the same date was open (enqueuing or draining), so
	// this one sent nothing.
	Joined bool `json:"joined,omitempty"`
	// Drained: a test clock's run waited until every message ended.
	Drained bool `json:"drained,omitempty"`
}

// MaxCauses bounds Report.Causes (package testclock adds up reports).
const MaxCauses = 3

// Because records why an entry left the run not OK (a new cause only).
func (r *Report) Because(what string, err error) {
	if err == nil {
		return
	}
	c := what + ": " + err.Error()
	if stripeUnreachable(err) {
		c = "Stripe unreachable: " + err.Error()
	}
	// One cause once: the same failure seen by the attempt and then by
	// its entry is one cause.
	root := err
	for u := errors.Unwrap(root); u != nil; u = errors.Unwrap(root) {
		root = u
	}
	r.Add(func(r *Report) {
		if len(r.Causes) >= MaxCauses || slices.Contains(r.Causes, c) || r.causeRoots[root.Error()] {
			return
		}
		if r.causeRoots == nil {
			r.causeRoots = map[string]bool{}
		}
		r.causeRoots[root.Error()] = true
		r.Causes = append(r.Causes, c)
	})
}

// stripeUnreachable: no answer came back (connection refused, a timeout,
// a DNS failure), as opposed to an answer that was an error.
func stripeUnreachable(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &oe) || (errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, context.DeadlineExceeded)
}

// Add changes the report under its lock (the accounts of a run are
// worked in parallel).
func (r *Report) Add(f func(r *Report)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

// OK reports a run that left nothing for a rerun: no locked account, no
// error, no period whose outcome is unknown.
func (r *Report) OK() bool {
	return r.Locked == 0 && r.Unknown == 0 && r.Unresolved == 0 && r.Errors == 0
}

// Why says why the run was not OK, in words, as far as it knows.
func (r *Report) Why() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case len(r.Causes) > 0:
		return strings.Join(r.Causes, "; ")
	case r.Locked > 0:
		return fmt.Sprintf("%d account(s) stayed locked by another holder", r.Locked)
	case r.Unresolved > 0:
		return fmt.Sprintf("%d period(s) left with an unknown outcome", r.Unresolved)
	}
	return "see the service logs"
}

// Summary is the run's counters on one line (logs, a test clock's error).
func (r *Report) Summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("entries=%d reminded=%d succeeded=%d processing=%d declined=%d stale=%d paused_skipped=%d resumed=%d skipped=%d locked=%d unknown=%d resolved=%d unresolved=%d errors=%d swept_from=%s",
		r.Entries, r.Reminded, r.Succeeded, r.Processing, r.Declined, r.Stale, r.PausedSkipped, r.Resumed, r.Skipped, r.Locked, r.Unknown, r.Resolved, r.Unresolved, r.Errors, r.SweptFrom)
}

// AttemptQueryOf is how Stripe is asked for the PaymentIntent of p's attempt
// in flight.
func AttemptQueryOf(p Period) AttemptQuery {
	q := AttemptQuery{StripeAccount: p.PaymentDetails.StripeAccount, Customer: p.PaymentDetails.Customer,
		Amount: p.Amount, Currency: p.Currency, Metadata: AttemptMeta(p, p.Attempts+1), Since: p.SentAt(),
		Exclude: map[string]bool{}}
	if p.TransactionID != "" {
		q.Exclude[p.TransactionID] = true // an earlier attempt's
	}
	return q
}

// OutcomeName names an outcome in the metrics and logs.
func OutcomeName(o Outcome) string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Processing:
		return "processing"
	case Declined:
		return "declined"
	}
	return "unknown"
}

// MaxUnresolvedSamples bounds Report.UnresolvedSamples.
const MaxUnresolvedSamples = 5

// LeftUnresolved counts period p left with its outcome unknown.
func (rep *Report) LeftUnresolved(p Period) {
	rep.Add(func(r *Report) {
		r.Unresolved++
		ref := p.AccountID + "/" + p.SubscriptionID
		if len(r.UnresolvedSamples) < MaxUnresolvedSamples && !slices.Contains(r.UnresolvedSamples, ref) {
			r.UnresolvedSamples = append(r.UnresolvedSamples, ref)
		}
	})
}

// ChargedOn records that the run charged on Stripe account.
func (r *Report) ChargedOn(account string) {
	r.Add(func(r *Report) {
		if r.chargedOn == nil {
			r.chargedOn = map[string]bool{}
		}
		r.chargedOn[account] = true
	})
}

// ChargedAccounts are the Stripe accounts the run charged on, to register
// for the poller at the end (subscriptions created before the registry).
func (r *Report) ChargedAccounts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var accounts []string
	for a := range r.chargedOn {
		accounts = append(accounts, a)
	}
	return accounts
}
