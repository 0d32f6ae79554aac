package billing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/lock"
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
	// Stale: periods given up on; Resumed: pauses ended.
	Stale   int `json:"stale"`
	Resumed int `json:"resumed"`
	// Skipped: entries with nothing to do (stale index reads, not due).
	Skipped int `json:"skipped"`
	// Locked: accounts whose lock another holder kept for the whole run.
	Locked int `json:"locked"`
	// Unknown: attempts left in flight (no trustworthy answer); a rerun
	// within the idempotency window completes them.
	Unknown int `json:"unknown"`
	// Unreconciled: attempts in flight for longer than the idempotency
	// window, left alone (README runbook).
	Unreconciled int `json:"unreconciled"`
	// Errors: entries that failed otherwise (see the logs).
	Errors int `json:"errors"`

	mu sync.Mutex
}

func (r *Report) add(f func(r *Report)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

// OK reports a run that left nothing for a rerun.
func (r *Report) OK() bool {
	return r.Locked == 0 && r.Unknown == 0 && r.Errors == 0
}

type accountWork struct {
	account string
	entries []IndexEntry
}

// Collect charges what is due on date (collect --date D): subscriptions
// whose next payment is due, failed periods whose retry is due, pauses that
// end. It reads the payments index partitions of date and the LookbackDays
// before it, shard by shard in parallel, and works account by account under
// the account's lease lock.
func (s *Service) Collect(ctx context.Context, date dates.Date) (*Report, error) {
	if s.charger == nil {
		return nil, errors.New("collect: no Stripe charger configured")
	}
	return s.run(ctx, "collect", date, dynamo.BillingPaymentsIndex, true, s.collectEntry)
}

// Remind sends the reminders due on date (remind --date D).
func (s *Service) Remind(ctx context.Context, date dates.Date) (*Report, error) {
	return s.run(ctx, "remind", date, dynamo.BillingRemindersIndex, false, s.remindEntry)
}

type entryFunc func(ctx context.Context, l *lock.Lock, e IndexEntry, date dates.Date, rep *Report) error

func (s *Service) run(ctx context.Context, job string, date dates.Date, index string, locked bool, fn entryFunc) (*Report, error) {
	rep := &Report{Job: job, Date: date.String()}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	log := s.log.With("job", job, "date", date.String())
	start := time.Now()

	var (
		mu      sync.Mutex
		retry   []accountWork
		wg      sync.WaitGroup
		readErr error
	)
	work := func(w accountWork) {
		err := s.account(ctx, w, date, locked, fn, rep)
		switch {
		case errors.Is(err, ErrLocked):
			mu.Lock()
			retry = append(retry, w)
			mu.Unlock()
		case errors.Is(err, ErrCrash):
			cancel(err)
		case err != nil && ctx.Err() == nil:
			log.Error("billing job: account failed", "account", w.account, "error", err)
			rep.add(func(r *Report) { r.Errors++ })
		}
	}
	for shard := 0; shard < s.store.Shards(); shard++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			accounts, err := s.readShard(ctx, index, date, shard)
			if err != nil {
				mu.Lock()
				readErr = errors.Join(readErr, err)
				mu.Unlock()
				return
			}
			n := 0
			for _, a := range accounts {
				n += len(a.entries)
			}
			rep.add(func(r *Report) { r.Entries += n })
			ch := make(chan accountWork)
			var workers sync.WaitGroup
			for range s.cfg.WorkersPerShard {
				workers.Add(1)
				go func() {
					defer workers.Done()
					for w := range ch {
						work(w)
					}
				}()
			}
			for _, a := range accounts {
				if ctx.Err() != nil {
					break
				}
				ch <- a
			}
			close(ch)
			workers.Wait()
		}()
	}
	wg.Wait()

	if len(retry) > 0 && s.cfg.LockedRetryWait > 0 && ctx.Err() == nil {
		log.Info("billing job: retrying locked accounts after a lease", "accounts", len(retry), "wait", s.cfg.LockedRetryWait.String())
		select {
		case <-ctx.Done():
		case <-time.After(s.cfg.LockedRetryWait):
		}
		again := retry
		retry = nil
		for _, w := range again {
			if ctx.Err() != nil {
				break
			}
			work(w)
		}
	}
	rep.Locked = len(retry)
	for _, w := range retry {
		log.Warn("billing job: account locked for the whole run; rerun the job", "account", w.account)
	}
	log.Info("billing job done", "report", rep.summary(), "elapsed", time.Since(start).String())
	if cause := context.Cause(ctx); cause != nil {
		return rep, cause
	}
	if readErr != nil {
		return rep, readErr
	}
	return rep, nil
}

func (r *Report) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("entries=%d reminded=%d succeeded=%d processing=%d declined=%d stale=%d resumed=%d skipped=%d locked=%d unknown=%d unreconciled=%d errors=%d",
		r.Entries, r.Reminded, r.Succeeded, r.Processing, r.Declined, r.Stale, r.Resumed, r.Skipped, r.Locked, r.Unknown, r.Unreconciled, r.Errors)
}

// readShard reads one shard's partitions for date and the lookback days,
// grouped by account in order of first appearance.
func (s *Service) readShard(ctx context.Context, index string, date dates.Date, shard int) ([]accountWork, error) {
	var accounts []accountWork
	pos := map[string]int{}
	seen := map[string]bool{}
	for d := date.AddDays(-s.cfg.LookbackDays); !d.After(date); d = d.AddDays(1) {
		entries, err := s.store.QueryIndex(ctx, index, d, shard)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if seen[e.PK+"|"+e.SK] {
				continue
			}
			seen[e.PK+"|"+e.SK] = true
			acc := e.Account()
			i, ok := pos[acc]
			if !ok {
				i = len(accounts)
				pos[acc] = i
				accounts = append(accounts, accountWork{account: acc})
			}
			accounts[i].entries = append(accounts[i].entries, e)
		}
	}
	return accounts, nil
}

// account processes one account's entries, under its lock when locked.
func (s *Service) account(ctx context.Context, w accountWork, date dates.Date, locked bool, fn entryFunc, rep *Report) error {
	each := func(ctx context.Context, l *lock.Lock) error {
		for _, e := range w.entries {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if l != nil && !l.Valid() {
				return fmt.Errorf("account %s: %w", w.account, lock.ErrNotOwner)
			}
			if err := fn(ctx, l, e, date, rep); err != nil {
				if errors.Is(err, ErrCrash) || errors.Is(err, lock.ErrNotOwner) {
					return err
				}
				s.log.Error("billing job: entry failed", "account", w.account, "sk", e.SK, "error", err)
				rep.add(func(r *Report) { r.Errors++ })
			}
		}
		return nil
	}
	if !locked {
		return each(ctx, nil)
	}
	return s.withLock(ctx, w.account, each)
}

func (s *Service) collectEntry(ctx context.Context, l *lock.Lock, e IndexEntry, date dates.Date, rep *Report) error {
	switch {
	case strings.HasPrefix(e.SK, prefixSub):
		sub, p, found, err := s.store.GetSubscriptionWithPeriod(ctx, e)
		if errors.Is(err, ErrNotFound) {
			rep.add(func(r *Report) { r.Skipped++ })
			return nil
		}
		if err != nil {
			return err
		}
		var due *Period
		if found && p.BillingDate.Equal(sub.NextPaymentDate) {
			due = &p
		}
		return s.collectDue(ctx, l, sub, due, date, rep)
	case strings.HasPrefix(e.SK, prefixPeriod):
		return s.retryEntry(ctx, l, e, date, rep)
	case strings.HasPrefix(e.SK, prefixResume):
		return s.resumeEntry(ctx, l, e, date, rep)
	}
	rep.add(func(r *Report) { r.Skipped++ })
	return nil
}

// collectDue charges a subscription's next payment if it is due by date,
// and keeps going while the next one is due too (catching up after days
// the job did not run).
// due, when known, is the period of sub's next payment as read with it.
func (s *Service) collectDue(ctx context.Context, l *lock.Lock, sub Subscription, due *Period, date dates.Date, rep *Report) error {
	for range 48 {
		today := s.today(sub)
		dueDate := sub.NextPaymentDate
		if sub.Status != SubActive || dueDate.IsZero() || dueDate.After(date) || dueDate.After(today) {
			rep.add(func(r *Report) { r.Skipped++ })
			return nil
		}
		next, moved, err := s.collectFirst(ctx, l, sub, due, today, rep)
		due = nil
		if err != nil || !moved || next.NextPaymentDate.Equal(dueDate) || next.Status != SubActive ||
			next.NextPaymentDate.After(date) || next.NextPaymentDate.After(today) {
			return err
		}
		sub = next
	}
	return nil
}

// collectFirst makes the first attempt on the period of sub's next payment,
// or marks it STALE when it is too old to collect.
// It returns the subscription as written when it moved on.
func (s *Service) collectFirst(ctx context.Context, l *lock.Lock, sub Subscription, due *Period, today dates.Date, rep *Report) (Subscription, bool, error) {
	var p Period
	if due != nil {
		p = *due
	} else {
		var err error
		p, err = s.store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, sub.NextPaymentDate)
		switch {
		case errors.Is(err, ErrNotFound):
			p = newPeriod(sub, sub.NextPaymentDate, Scheduled, ProcInitial, "recreated", s.now())
		case err != nil:
			return sub, false, err
		}
	}
	if p.Status != Scheduled {
		// Settled elsewhere (a webhook about a charge made outside this job):
		// nothing to charge, but the subscription must move on.
		s.log.Warn("billing job: next payment's period is no longer SCHEDULED; moving on without charging",
			"account", sub.AccountID, "subscription_id", sub.SubscriptionID, "billing_date", p.BillingDate.String(), "status", string(p.Status))
		now := s.now()
		tx := s.store.NewTx(s.cause("collect", p, today), now)
		s.advance(tx, &sub, p.BillingDate, today, ProcInitial, now)
		tx.PutSubscription(&sub)
		if err := s.store.Commit(ctx, tx); err != nil {
			if errors.Is(err, ErrConflict) {
				return sub, false, nil
			}
			return sub, false, fmt.Errorf("move on: %w", err)
		}
		rep.add(func(r *Report) { r.Skipped++ })
		return sub, true, nil
	}
	if s.cfg.Retry.IsStale(p.BillingDate, today) && p.InFlightKey == "" {
		now := s.now()
		tx := s.store.NewTx(s.cause("collect", p, today), now)
		p.Status, p.Process, p.UpdatedEvent, p.CompletionDate = Stale, ProcInitial, "stale", now
		tx.PutPeriod(&p, false)
		s.advance(tx, &sub, p.BillingDate, today, ProcInitial, now)
		tx.PutSubscription(&sub)
		if err := s.store.Commit(ctx, tx); err != nil {
			return sub, false, fmt.Errorf("mark stale: %w", err)
		}
		rep.add(func(r *Report) { r.Stale++ })
		return sub, true, nil
	}
	return s.attempt(ctx, l, sub, p, ProcInitial, today, rep)
}

func (s *Service) cause(job string, p Period, today dates.Date) string {
	return fmt.Sprintf("%s:%s:attempt-%d", job, today, p.Attempts+1)
}

// IdempotencyKey of attempt n on a period: the same attempt always sends
// the same key, so a rerun after a crash gets the same PaymentIntent back.
func IdempotencyKey(p Period, n int) string {
	k := fmt.Sprintf("billing:%s:%s:%s:%d", p.AccountID, p.SubscriptionID, p.BillingDate, n)
	if len(k) > 255 {
		sum := sha256.Sum256([]byte(k))
		k = "billing:" + hex.EncodeToString(sum[:])
	}
	return k
}

// attempt charges a period: claim (conditional write), charge, record.
// It returns the subscription as written, and whether it was.
func (s *Service) attempt(ctx context.Context, l *lock.Lock, sub Subscription, p Period, proc Process, today dates.Date, rep *Report) (Subscription, bool, error) {
	now := s.now()
	// Claim: re-check on the table that the subscription is still ACTIVE and
	// unchanged, and record the attempt's idempotency key before charging.
	if p.InFlightKey != "" && now.Sub(p.InFlightAt) > s.cfg.IdempotencyWindow {
		s.log.Error("billing job: attempt in flight beyond Stripe's idempotency window; not retrying (runbook: ERROR period)",
			"account", p.AccountID, "subscription_id", p.SubscriptionID, "billing_date", p.BillingDate.String(),
			"idempotency_key", p.InFlightKey, "in_flight_since", p.InFlightAt)
		rep.add(func(r *Report) { r.Unreconciled++ })
		return sub, false, nil
	}
	if p.InFlightKey == "" {
		p.InFlightKey, p.InFlightAt = IdempotencyKey(p, p.Attempts+1), now
		if p.InitialRunDate.IsZero() {
			p.InitialRunDate = now
		}
		claim := s.store.NewTx("claim", now)
		claim.CheckSubscription(sub)
		claim.PutPeriod(&p, true)
		if err := s.store.Commit(ctx, claim); err != nil {
			if errors.Is(err, ErrConflict) {
				rep.add(func(r *Report) { r.Skipped++ })
				return sub, false, nil // changed since the index read: nothing to charge now
			}
			return sub, false, fmt.Errorf("claim: %w", err)
		}
	} else if sub.Status != SubActive {
		// Cannot happen: changes are refused while an attempt is in flight.
		s.log.Error("billing job: attempt in flight on a subscription that is not ACTIVE; not charging",
			"account", p.AccountID, "subscription_id", p.SubscriptionID, "billing_date", p.BillingDate.String())
		rep.add(func(r *Report) { r.Unreconciled++ })
		return sub, false, nil
	}
	// A rerun of an attempt in flight reuses its claim: the subscription was
	// re-read under the lock, and no change is accepted while an attempt is
	// in flight, so it is still ACTIVE.
	if err := s.step("claimed", p); err != nil {
		return sub, false, err
	}
	if l != nil && !l.Valid() {
		return sub, false, fmt.Errorf("before charging: %w", lock.ErrNotOwner)
	}
	attemptNo := p.Attempts + 1
	// The charge stops when the job is cancelled or the lock is lost.
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	if l != nil {
		defer context.AfterFunc(l.Context(), stop)()
	}
	res, err := s.charger.Charge(cctx, ChargeRequest{
		StripeAccount: p.PaymentDetails.StripeAccount, Customer: p.PaymentDetails.Customer,
		PaymentMethod: p.PaymentDetails.PaymentMethod, Amount: p.Amount, Currency: p.Currency,
		IdempotencyKey: p.InFlightKey, Description: fmt.Sprintf("%s %s", p.SKU, p.BillingDate),
		Metadata: map[string]string{MetaAccount: p.AccountID, MetaSubscription: p.SubscriptionID,
			MetaDate: p.BillingDate.String(), MetaSKU: p.SKU},
	})
	if err != nil {
		rep.add(func(r *Report) { r.Unknown++ })
		return sub, false, fmt.Errorf("charge %s %s: %w", p.SubscriptionID, p.BillingDate, err)
	}
	if err := s.step("charged", p); err != nil {
		return sub, false, err
	}
	now = s.now()
	// The action reflects what Stripe did, so it goes out before the write:
	// a rerun gets the same PaymentIntent and the same dedupe key.
	switch res.Outcome {
	case Succeeded:
		err = s.notifier.Notify(ctx, paymentAction(ActionPaymentCompleted, p, res.PaymentIntent, attemptNo, "", now))
	case Declined:
		err = s.notifier.Notify(ctx, paymentAction(ActionPaymentFailed, p, res.PaymentIntent, attemptNo, res.Error, now))
	}
	if err != nil {
		return sub, false, err
	}
	tx := s.store.NewTx(s.cause("collect", p, today), now)
	s.record(tx, &sub, &p, res, proc, today, today, now)
	if err := s.store.Commit(ctx, tx); err != nil {
		return sub, false, fmt.Errorf("record attempt (the charge is in Stripe; a rerun or its webhook records it): %w", err)
	}
	rep.add(func(r *Report) {
		switch res.Outcome {
		case Succeeded:
			r.Succeeded++
		case Processing:
			r.Processing++
		default:
			r.Declined++
		}
	})
	return sub, true, s.step("committed", p)
}

// record writes the outcome of an attempt into tx: the period's new status,
// a receipt for a success, and the subscription moved on when this was the
// first attempt on its next payment.
func (s *Service) record(tx *Tx, sub *Subscription, p *Period, res ChargeResult, proc Process, today, processed dates.Date, now time.Time) {
	p.Attempts++
	p.InFlightKey, p.InFlightAt = "", time.Time{}
	p.Process = proc
	if res.PaymentIntent != "" {
		p.TransactionID = res.PaymentIntent
		tx.PutPaymentRef(PaymentRef{PaymentIntent: res.PaymentIntent, AccountID: p.AccountID,
			SubscriptionID: p.SubscriptionID, BillingDate: p.BillingDate})
	}
	switch res.Outcome {
	case Succeeded:
		s.complete(tx, p, res.PaymentIntent, processed, now)
	case Processing:
		p.Status, p.UpdatedEvent, p.Error, p.NextAttemptDate = ACHSent, "ach-sent", "", dates.Date{}
	default:
		next, _ := s.cfg.Retry.NextAttempt(p.BillingDate, today)
		p.Status, p.UpdatedEvent, p.Error, p.NextAttemptDate = Error, "attempt-failed", res.Error, next
	}
	tx.PutPeriod(p, false)
	subChanged := false
	if sub.Status == SubActive && sub.NextPaymentDate.Equal(p.BillingDate) {
		s.advance(tx, sub, p.BillingDate, today, proc, now)
		subChanged = true
	}
	if p.Status == Completed && p.BillingDate.After(sub.LastPaymentDate) {
		sub.LastPaymentDate = p.BillingDate
		subChanged = true
	}
	if subChanged {
		tx.PutSubscription(sub)
	}
}

// complete marks p COMPLETED and writes its receipt.
func (s *Service) complete(tx *Tx, p *Period, pi string, processed dates.Date, now time.Time) {
	tx.PutReceipt(Receipt{
		AccountID: p.AccountID, SubscriptionID: p.SubscriptionID, SKU: p.SKU, ProcessedDate: processed,
		BillingDate: p.BillingDate, Amount: p.Amount, Currency: p.Currency, PaymentIntent: pi,
		ExpiresAt: now.Add(s.cfg.ReceiptTTL),
	})
	p.Status, p.Error, p.NextAttemptDate, p.CompletionDate = Completed, "", dates.Date{}, now
	if !strings.HasPrefix(p.UpdatedEvent, "late-success") {
		p.UpdatedEvent = "completed"
	}
}

// retryEntry handles a failed period whose next look is due: retry it,
// or mark it STALE, or (subscription paused) put the retry off.
func (s *Service) retryEntry(ctx context.Context, l *lock.Lock, e IndexEntry, date dates.Date, rep *Report) error {
	p, err := s.store.GetPeriodAt(ctx, e)
	if errors.Is(err, ErrNotFound) {
		rep.add(func(r *Report) { r.Skipped++ })
		return nil
	}
	if err != nil {
		return err
	}
	sub, err := s.store.GetSubscription(ctx, p.AccountID, p.SubscriptionID)
	if err != nil {
		return err
	}
	today := s.today(sub)
	if p.Status != Error || p.NextAttemptDate.IsZero() || p.NextAttemptDate.After(date) || p.NextAttemptDate.After(today) {
		rep.add(func(r *Report) { r.Skipped++ })
		return nil
	}
	now := s.now()
	tx := s.store.NewTx(s.cause("retry", p, today), now)
	switch {
	case p.InFlightKey != "":
		// A crashed attempt: finish it with the same key (even if stale now:
		// the charge may already have happened).
		_, _, err := s.attempt(ctx, l, sub, p, ProcRetry, today, rep)
		return err
	case sub.Status == SubCancelled:
		p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = Cancelled, ProcRetry, "cancelled", now, dates.Date{}
	case s.cfg.Retry.IsStale(p.BillingDate, today):
		p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = Stale, ProcRetry, "stale", now, dates.Date{}
		rep.add(func(r *Report) { r.Stale++ })
	case sub.Status == SubPaused:
		p.NextAttemptDate, _ = s.cfg.Retry.NextAttempt(p.BillingDate, today)
		p.Process, p.UpdatedEvent = ProcRetry, "retry-deferred-paused"
		rep.add(func(r *Report) { r.Skipped++ })
	default:
		_, _, err := s.attempt(ctx, l, sub, p, ProcRetry, today, rep)
		return err
	}
	tx.PutPeriod(&p, false)
	if err := s.store.Commit(ctx, tx); err != nil {
		return fmt.Errorf("update failed period: %w", err)
	}
	return nil
}

// resumeEntry ends a pause whose resume marker is due, then charges the
// first period if it is already due.
func (s *Service) resumeEntry(ctx context.Context, l *lock.Lock, e IndexEntry, date dates.Date, rep *Report) error {
	m, err := s.store.GetResumeMarkerAt(ctx, e)
	if errors.Is(err, ErrNotFound) {
		rep.add(func(r *Report) { r.Skipped++ })
		return nil
	}
	if err != nil {
		return err
	}
	sub, err := s.store.GetSubscription(ctx, m.AccountID, m.SubscriptionID)
	if err != nil {
		return err
	}
	today := s.today(sub)
	if m.TriggerDate.After(date) || m.TriggerDate.After(today) {
		rep.add(func(r *Report) { r.Skipped++ })
		return nil
	}
	if sub.Status != SubPaused {
		tx := s.store.NewTx("resume", s.now())
		tx.DeleteResumeMarker(m)
		return s.store.Commit(ctx, tx)
	}
	sub, err = s.resume(ctx, sub, m.ResumeDate, ProcPause, "pause-resume", fmt.Sprintf("resume:%s", today))
	if err != nil {
		return err
	}
	rep.add(func(r *Report) { r.Resumed++ })
	return s.collectDue(ctx, l, sub, nil, date, rep)
}

// remindEntry sends a due reminder: claim (conditional write naming the
// payment it announces), notify (idempotent per subscription and payment
// date), then move the reminder on to the following payment.
func (s *Service) remindEntry(ctx context.Context, _ *lock.Lock, e IndexEntry, date dates.Date, rep *Report) error {
	if !strings.HasPrefix(e.SK, prefixSub) {
		return nil
	}
	sub, err := s.store.GetSubscriptionAt(ctx, e)
	if errors.Is(err, ErrNotFound) {
		rep.add(func(r *Report) { r.Skipped++ })
		return nil
	}
	if err != nil {
		return err
	}
	today := s.today(sub)
	if sub.Status != SubActive || sub.NextReminderDate.IsZero() || sub.NextReminderDate.After(date) || sub.NextReminderDate.After(today) {
		rep.add(func(r *Report) { r.Skipped++ })
		return nil
	}
	target := sub.RemindFor
	if target.IsZero() {
		target = sub.NextPaymentDate
	}
	now := s.now()
	if !target.Before(today) {
		if !sub.ReminderPending.Equal(target) {
			sub.ReminderPending = target
			claim := s.store.NewTx("remind", now)
			claim.PutSubscription(&sub)
			if err := s.store.Commit(ctx, claim); err != nil {
				if errors.Is(err, ErrConflict) {
					rep.add(func(r *Report) { r.Skipped++ })
					return nil
				}
				return fmt.Errorf("claim reminder: %w", err)
			}
		}
		if err := s.notifier.Notify(ctx, reminderAction(sub, target, now)); err != nil {
			return err
		}
		sent := date
		if sent.After(today) {
			sent = today
		}
		sub.LastReminderDate = sent
		rep.add(func(r *Report) { r.Reminded++ })
	} else {
		rep.add(func(r *Report) { r.Skipped++ }) // too late to remind: the payment date passed
	}
	next := sub.Rule().Next(target)
	sub.ReminderPending, sub.RemindFor = dates.Date{}, next
	sub.NextReminderDate = dates.ReminderDate(next, s.cfg.ReminderDays, today.AddDays(1))
	tx := s.store.NewTx("remind", now)
	tx.PutSubscription(&sub)
	if err := s.store.Commit(ctx, tx); err != nil && !errors.Is(err, ErrConflict) {
		return fmt.Errorf("advance reminder: %w", err)
	}
	return nil
}

// NowDate is the job date of a run without --date: tomorrow in UTC, so
// that subscriptions in time zones ahead of UTC are seen on their own
// date. Each subscription is acted on only once its payment (or reminder)
// date has come in its own time zone.
func (s *Service) NowDate() dates.Date { return dates.In(s.now(), time.UTC).AddDays(1) }

// CollectNow is Collect for the current date (the in-process ticker).
func (s *Service) CollectNow(ctx context.Context) (*Report, error) {
	return s.Collect(ctx, s.NowDate())
}

// RemindNow is Remind for the current date (the in-process ticker).
func (s *Service) RemindNow(ctx context.Context) (*Report, error) { return s.Remind(ctx, s.NowDate()) }
