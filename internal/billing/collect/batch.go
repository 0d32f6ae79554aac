package collect

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// docs/design.md §8 "Batch collection": an operator's batch charges each selected
// subscription's oldest ERROR period once, exactly as pay now would (the
// same lock, claim and idempotency key rules), process BATCH; a
// subscription with an attempt in flight is skipped and reported. Hard-
// declined periods are collected too. This file selects the subscriptions
// and charges one; the durable batch and its background run are
// internal/billing/batchrun.

// docs/design.md §8 "Batch collection": an operator's batch charges each selected
// subscription's oldest ERROR period once, exactly as pay now would (the
// same lock, claim and idempotency key rules), process BATCH; a
// subscription with an attempt in flight is skipped and reported. Hard-
// declined periods are collected too. This file selects the subscriptions
// and charges one; the durable batch and its background run are
// internal/billing/batchrun.

// Batch limits: a selection is bounded so one request cannot read or charge
// the whole table.
const (
	// MaxBatchAccounts is how many account_ids one batch names.
	MaxBatchAccounts = 1000
	// MaxBatchRangeDays bounds a time range (and is the range an open end
	// is given when no account is named).
	MaxBatchRangeDays = 366
)

// BatchSelection selects the subscriptions of a batch: those of AccountIDs
// (all accounts when empty) whose oldest ERROR period is charged (Due) on a
// date in [Since, Until] (an open end when zero). No account and no date is
// refused: it would collect everything.
type BatchSelection struct {
	AccountIDs []string
	Since      dates.Date
	Until      dates.Date
}

// Skip reasons of a selected subscription (BatchCandidate.Skip).
const (
	// SkipInFlight: a period of the subscription has an attempt whose
	// outcome is not recorded yet; the collection job settles it first.
	SkipInFlight = "in_flight"
)

// BatchCandidate is one selected subscription and the period a batch would
// charge.
type BatchCandidate struct {
	AccountID      string
	SubscriptionID string
	SKU            string
	BillingDate    dates.Date // the oldest ERROR period
	Amount         int64
	Currency       string
	DeclineCode    string
	NotRetried     bool
	Attempts       int
	TestClock      string
	// Skip is why the batch will not charge it ("" : it will).
	Skip string
}

// Validate refuses a selection that names nothing, or is malformed.
func (sel BatchSelection) Validate() error {
	if len(sel.AccountIDs) == 0 && sel.Since.IsZero() && sel.Until.IsZero() {
		return apperr.Invalid("a batch needs account_ids or a time range (since, until): without either it would collect every ERROR period")
	}
	if len(sel.AccountIDs) > MaxBatchAccounts {
		return apperr.Invalid("account_ids: at most %d", MaxBatchAccounts)
	}
	seen := map[string]bool{}
	for _, a := range sel.AccountIDs {
		if !model.ValidID(a) {
			return apperr.Invalid("account_ids: %q: 1-128 characters without '#', '/' or spaces", a)
		}
		if seen[a] {
			return apperr.Invalid("account_ids: %s named twice", a)
		}
		seen[a] = true
	}
	if !sel.Since.IsZero() && !sel.Until.IsZero() {
		if sel.Until.Before(sel.Since) {
			return apperr.Invalid("until must be on or after since")
		}
		if len(sel.AccountIDs) == 0 && sel.Since.AddDays(MaxBatchRangeDays).Before(sel.Until) {
			return apperr.Invalid("a time range without account_ids spans at most %d days", MaxBatchRangeDays)
		}
	}
	return nil
}

// bounds is the selection's closed date range, an open end made explicit
// when no account is named (the index is read date by date).
func (sel BatchSelection) bounds() (since, until dates.Date) {
	since, until = sel.Since, sel.Until
	if len(sel.AccountIDs) == 0 {
		if since.IsZero() {
			since = until.AddDays(-MaxBatchRangeDays)
		}
		if until.IsZero() {
			until = since.AddDays(MaxBatchRangeDays)
		}
	}
	return since, until
}

func (sel BatchSelection) inRange(d dates.Date) bool {
	since, until := sel.bounds()
	return (since.IsZero() || !d.Before(since)) && (until.IsZero() || !d.After(until))
}

// SelectBatch lists the subscriptions sel selects, each with the period a
// batch would charge (its oldest ERROR period) or why it would skip it,
// ordered by account and subscription. It changes nothing.
func (c *Collector) SelectBatch(ctx context.Context, sel BatchSelection) ([]BatchCandidate, error) {
	if err := sel.Validate(); err != nil {
		return nil, err
	}
	type key struct{ account, sub string }
	var subs []key
	// One item per subscription: a plan change moves a subscription to a
	// new key while its account is listed page by page, so the listing can
	// name it twice; so can the index, date by date.
	seen := map[key]bool{}
	if len(sel.AccountIDs) > 0 {
		for _, a := range sel.AccountIDs {
			cursor := ""
			for {
				page, err := c.Store.ListSubscriptions(ctx, a, 1000, cursor)
				if err != nil {
					return nil, fmt.Errorf("batch selection: subscriptions of %s: %w", a, err)
				}
				for _, sub := range page.Items {
					if k := (key{a, sub.SubscriptionID}); !seen[k] {
						seen[k] = true
						subs = append(subs, k)
					}
				}
				if page.NextCursor == "" {
					break
				}
				cursor = page.NextCursor
			}
		}
	} else {
		// No account: ERROR periods are in the payments index on their next
		// look (a retry day, or the stale date), which lies between their
		// charge date and their stale date; read the real-time partitions
		// and each test clock's over that span.
		since, until := sel.bounds()
		clocks, err := c.Store.ListClockIDs(ctx)
		if err != nil {
			return nil, fmt.Errorf("batch selection: test clocks: %w", err)
		}
		last := c.Cfg.Retry.StaleDate(until)
		for _, clock := range append([]string{""}, clocks...) {
			for d := since; !d.After(last); d = d.AddDays(1) {
				for shard := 0; shard < c.Store.Shards(); shard++ {
					entries, err := c.Store.QueryIndex(ctx, model.PaymentsIndex, clock, d, shard)
					if err != nil {
						return nil, fmt.Errorf("batch selection: payments index %s: %w", d, err)
					}
					for _, e := range entries {
						if e.Kind != model.EntryPeriod {
							continue
						}
						p, err := c.Store.GetPeriodAt(ctx, e)
						if errors.Is(err, apperr.ErrNotFound) {
							continue
						}
						if err != nil {
							return nil, fmt.Errorf("batch selection: %w", err)
						}
						k := key{p.AccountID, p.SubscriptionID}
						if p.Status == model.Error && sel.inRange(p.Due()) && !seen[k] {
							seen[k] = true
							subs = append(subs, k)
						}
					}
				}
			}
		}
	}
	out := []BatchCandidate{}
	for _, k := range subs {
		c, ok, err := c.batchCandidate(ctx, k.account, k.sub, sel)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].AccountID != out[j].AccountID {
			return out[i].AccountID < out[j].AccountID
		}
		return out[i].SubscriptionID < out[j].SubscriptionID
	})
	return out, nil
}

// batchCandidate reads one subscription's periods: ok when its oldest ERROR
// period is in sel's range and the subscription is not cancelled.
func (c *Collector) batchCandidate(ctx context.Context, account, subID string, sel BatchSelection) (BatchCandidate, bool, error) {
	sub, err := c.Store.GetSubscription(ctx, account, subID)
	if errors.Is(err, apperr.ErrNotFound) {
		return BatchCandidate{}, false, nil
	}
	if err != nil {
		return BatchCandidate{}, false, fmt.Errorf("batch selection: %s: %w", subID, err)
	}
	if sub.Status == model.SubCancelled {
		return BatchCandidate{}, false, nil // pay now refuses it too
	}
	periods, err := c.Store.ListPeriods(ctx, account, subID)
	if err != nil {
		return BatchCandidate{}, false, fmt.Errorf("batch selection: periods of %s: %w", subID, err)
	}
	var (
		due      *model.Period
		inFlight bool
	)
	for i := range periods { // oldest first
		inFlight = inFlight || periods[i].InFlightKey != ""
		if due == nil && periods[i].Status == model.Error {
			due = &periods[i]
		}
	}
	if due == nil || !sel.inRange(due.Due()) {
		return BatchCandidate{}, false, nil
	}
	cand := BatchCandidate{AccountID: account, SubscriptionID: subID, SKU: sub.SKU, BillingDate: due.BillingDate,
		Amount: due.Amount, Currency: due.Currency, DeclineCode: due.DeclineCode, NotRetried: due.NotRetried,
		Attempts: due.Attempts, TestClock: sub.TestClock}
	if inFlight {
		cand.Skip = SkipInFlight
	}
	return cand, true, nil
}

// BatchAttempt is the attempt a batch item began: the period and the
// attempt number whose idempotency key it claims.
type BatchAttempt struct {
	BillingDate dates.Date
	AttemptNo   int
}

// Outcomes of one batch item (BatchResult.Outcome).
const (
	BatchPaid       = "paid"       // the charge succeeded
	BatchProcessing = "processing" // a bank debit, settling later
	BatchDeclined   = "declined"   // the period stays ERROR
	// BatchNothing: the selected period is no longer the subscription's
	// oldest ERROR period (paid, waived, stale… since the selection).
	BatchNothing = "nothing_to_pay"
	// BatchSkippedInFlight: an attempt of the subscription is in flight.
	BatchSkippedInFlight = "skipped_in_flight"
	// BatchSkippedCancelled: the subscription was cancelled meanwhile.
	BatchSkippedCancelled = "skipped_cancelled"
)

// BatchResult is what charging one batch item did.
type BatchResult struct {
	Outcome       string
	BillingDate   dates.Date
	PaymentIntent string
	DeclineCode   string
}

// BatchCharge charges the subscription's oldest ERROR period as pay now does
// (Pay), process BATCH, provided it is still the period selected (want).
// begin is called under the account's lock before the attempt is claimed,
// with the attempt about to be made: the caller records it durably first,
// and a failure of begin charges nothing.
//
// prev is the attempt an earlier run of this item began and did not record
// (a crash): if that attempt is still in flight it is settled with its own
// idempotency key (resent, or looked up), never made again under a new one;
// if someone else settled it meanwhile (the collection job) its outcome is
// reported from the period and nothing is charged.
//
// ErrLocked and ErrConflict mean nothing happened and the item may be tried
// again; an error after the claim leaves the attempt in flight (the
// outcome is unknown), for a resume of the item or the collection job.
func (c *Collector) BatchCharge(ctx context.Context, account, subID string, want dates.Date, prev *BatchAttempt,
	begin func(BatchAttempt) error) (BatchResult, error) {
	if c.Charger == nil {
		return BatchResult{}, errors.New("batch collection: no Stripe charger configured")
	}
	var out BatchResult
	err := c.WithLock(ctx, account, func(ctx context.Context, l *lock.Lock) error {
		sub, err := c.Store.GetSubscription(ctx, account, subID)
		if err != nil {
			return err
		}
		c, err := c.forSub(ctx, sub)
		if err != nil {
			return err
		}
		periods, err := c.Store.ListPeriods(ctx, account, subID)
		if err != nil {
			return err
		}
		if prev != nil {
			for _, p := range periods {
				if p.BillingDate != prev.BillingDate {
					continue
				}
				switch {
				case p.InFlightKey != "" && p.InFlightKey == model.IdempotencyKey(p, prev.AttemptNo):
					// Our attempt, still in flight: settle it with its key.
					return c.batchAttempt(ctx, l, sub, p, &out)
				case p.Attempts >= prev.AttemptNo:
					// Settled by another path since (the collection job
					// resolved it): report, charge nothing.
					out = batchOutcomeOf(p)
					return nil
				}
			}
			// The claim was never written: nothing was sent; go on as new.
		}
		var due *model.Period
		for i := range periods {
			if periods[i].InFlightKey != "" {
				out = BatchResult{Outcome: BatchSkippedInFlight, BillingDate: periods[i].BillingDate}
				return nil
			}
			if due == nil && periods[i].Status == model.Error {
				due = &periods[i]
			}
		}
		switch {
		case due == nil || due.BillingDate != want:
			out = BatchResult{Outcome: BatchNothing, BillingDate: want}
			return nil
		case sub.Status == model.SubCancelled:
			out = BatchResult{Outcome: BatchSkippedCancelled, BillingDate: want}
			return nil
		}
		if err := begin(BatchAttempt{BillingDate: due.BillingDate, AttemptNo: due.Attempts + 1}); err != nil {
			return fmt.Errorf("batch collection: record the attempt before charging: %w", err)
		}
		return c.batchAttempt(ctx, l, sub, *due, &out)
	})
	return out, err
}

// batchAttempt makes (or settles) the attempt on p, process BATCH, and
// reports the period as it is afterwards.
func (c *Collector) batchAttempt(ctx context.Context, l *lock.Lock, sub model.Subscription, p model.Period, out *BatchResult) error {
	rep := &model.Report{Job: "batch"}
	if _, _, err := c.attempt(ctx, l, sub, p, model.ProcBatch, c.Today(sub), rep); err != nil {
		return err
	}
	if rep.Skipped > 0 {
		return fmt.Errorf("batch collection: the subscription changed meanwhile: %w", model.ErrConflict)
	}
	after, err := c.Store.GetPeriod(ctx, p.AccountID, p.SubscriptionID, p.BillingDate)
	if err != nil {
		return err
	}
	*out = batchOutcomeOf(after)
	if rep.PaidByCustomer > 0 && out.Outcome != BatchPaid {
		out.Outcome = BatchNothing
	}
	return nil
}

// batchOutcomeOf names a period's state after an attempt.
func batchOutcomeOf(p model.Period) BatchResult {
	r := BatchResult{BillingDate: p.BillingDate, PaymentIntent: p.TransactionID, DeclineCode: p.DeclineCode}
	switch p.Status {
	case model.Completed, model.Refunded:
		r.Outcome = BatchPaid
	case model.ACHSent:
		r.Outcome = BatchProcessing
	case model.Error:
		r.Outcome = BatchDeclined
	default:
		r.Outcome = BatchNothing
	}
	return r
}
