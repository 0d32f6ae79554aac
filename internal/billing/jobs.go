package billing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
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
	// still unknown (resolve.go); the next run settles them. Not OK.
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
	// Queue: the run went through the billing queue (queued.go).
	Queue *QueueRun `json:"queue,omitempty"`

	// chargedOn: the Stripe accounts this run charged on, registered for
	// the poller at the end (subscriptions created before the registry).
	chargedOn map[string]bool
	// causeRoots: the innermost errors of Causes (because).
	causeRoots map[string]bool

	mu sync.Mutex
}

// MaxCauses bounds Report.Causes (package testclock adds up reports).
const MaxCauses = 3

// because records why an entry left the run not OK (a new cause only).
func (r *Report) because(what string, err error) {
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
	r.add(func(r *Report) {
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

func (r *Report) add(f func(r *Report)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

// OK reports a run that left nothing for a rerun: no locked account, no
// error, no period whose outcome is unknown.
func (r *Report) OK() bool {
	return r.Locked == 0 && r.Unknown == 0 && r.Unresolved == 0 && r.Errors == 0
}

type accountWork struct {
	account string
	entries []IndexEntry
}

// Collect charges what is due on date (collect --date D): subscriptions
// whose next period is due (paused periods are skipped on their dates),
// failed periods whose retry is due. It reads the payments index partitions of date and the LookbackDays
// before it, shard by shard in parallel, and works account by account under
// the account's lease lock.
func (s *Service) Collect(ctx context.Context, date dates.Date) (*Report, error) {
	if s.charger == nil {
		return nil, errors.New("collect: no Stripe charger configured")
	}
	if s.queued != nil {
		return s.enqueueCollect(ctx, date)
	}
	return s.run(ctx, "collect", date, PaymentsIndex, true, s.collectEntry)
}

// Remind sends the reminders due on date (remind --date D).
func (s *Service) Remind(ctx context.Context, date dates.Date) (*Report, error) {
	return s.run(ctx, "remind", date, RemindersIndex, false, s.remindEntry)
}

type entryFunc func(ctx context.Context, l *lock.Lock, e IndexEntry, date dates.Date, rep *Report) error

func (s *Service) run(ctx context.Context, job string, date dates.Date, index Index, locked bool, fn entryFunc) (*Report, error) {
	rep := &Report{Job: job, Date: date.String()}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	log := s.log.With("job", job, "date", date.String())
	start := time.Now()
	from := date.AddDays(-s.cfg.LookbackDays)
	if locked { // collect: reach back to what the last clean run left
		var err error
		if from, err = s.sweepFrom(ctx, s.sweepKey(job), date); err != nil {
			return rep, err
		}
	}
	rep.SweptFrom = from.String()

	var (
		mu    sync.Mutex
		retry []accountWork
	)
	work := func(w accountWork) {
		// One account's panic fails that account only (logged and
		// counted, and an error of the run like any other failure); its
		// lock's lease lets the next run in.
		err := s.safe.Do("billing_account", func() error { return s.account(ctx, w, date, locked, fn, rep) })
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
			rep.because("account "+w.account, err)
		}
	}
	readErr := s.eachShard(ctx, index, from, date, rep, work)
	s.retryLocked(ctx, log, &retry, work)
	s.registerChargedOn(ctx, log, rep)
	rep.Locked = len(retry)
	for _, w := range retry {
		log.Warn("billing job: account locked for the whole run; rerun the job", "account", w.account)
	}
	if locked {
		s.endSweep(ctx, log, job, date, rep, readErr)
	}
	log.Info("billing job done", "report", rep.Summary(), "elapsed", time.Since(start).String())
	if cause := context.Cause(ctx); cause != nil {
		return rep, cause
	}
	if readErr != nil {
		return rep, readErr
	}
	return rep, nil
}

// eachShard reads every shard's partitions from from to date in parallel
// and hands each account's entries to work, WorkersPerShard at a time per
// shard; it returns the read errors.
func (s *Service) eachShard(ctx context.Context, index Index, from, date dates.Date, rep *Report, work func(accountWork)) error {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		readErr error
	)
	for shard := 0; shard < s.indexShards(); shard++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			accounts, err := s.readShard(ctx, index, from, date, shard)
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
	return readErr
}

// retryLocked works once more, after LockedRetryWait (a lease: enough to
// take over a crashed holder's lock), the accounts found locked; work adds
// the ones still locked to *retry again.
func (s *Service) retryLocked(ctx context.Context, log *slog.Logger, retry *[]accountWork, work func(accountWork)) {
	if len(*retry) == 0 || s.cfg.LockedRetryWait <= 0 || ctx.Err() != nil {
		return
	}
	log.Info("billing job: retrying locked accounts after a lease", "accounts", len(*retry), "wait", s.cfg.LockedRetryWait.String())
	select {
	case <-ctx.Done():
	case <-time.After(s.cfg.LockedRetryWait):
	}
	again := *retry
	*retry = nil
	for _, w := range again {
		if ctx.Err() != nil {
			break
		}
		work(w)
	}
}

// registerChargedOn registers for the poller the Stripe accounts the run
// charged on (subscriptions created before the registry).
func (s *Service) registerChargedOn(ctx context.Context, log *slog.Logger, rep *Report) {
	if len(rep.chargedOn) == 0 {
		return
	}
	var accounts []string
	for a := range rep.chargedOn {
		accounts = append(accounts, a)
	}
	if err := s.store.RegisterChargedAccounts(context.WithoutCancel(ctx), accounts...); err != nil {
		log.Warn("billing job: could not register the Stripe accounts charged on (the poller may miss them until the next run)", "error", err)
	}
}

// endSweep ends a collection run: the unresolved-periods gauge, and the
// sweep watermark moved on when the run left nothing behind.
func (s *Service) endSweep(ctx context.Context, log *slog.Logger, job string, date dates.Date, rep *Report, readErr error) {
	if s.clock == "" { // the gauge is about real time; a clock reports its own runs
		s.gauge.set(date, func() { s.obs.UnresolvedPeriods(rep.Unresolved) })
	}
	if readErr == nil && context.Cause(ctx) == nil && rep.OK() {
		// Everything due by date was handled: later runs need not read
		// those partitions again (but for the lookback).
		// Two days back, not one: an entry of the last days may not be
		// due yet in its own time zone (up to 14 h either side of UTC).
		if err := s.store.AdvanceSweep(context.WithoutCancel(ctx), s.sweepKey(job), date.AddDays(-2)); err != nil {
			log.Warn("billing job: could not advance the sweep watermark (the next run reads further back)", "error", err)
		}
	} else if rep.Unresolved > 0 {
		log.Error("billing job: periods with an unknown outcome are unresolved; rerun the job (docs/runbooks/StripePaymentsBillingUnresolvedCharges.md)", "unresolved", rep.Unresolved)
	}
}

// gaugeDate keeps the unresolved gauge to the newest date's run: a run
// for an older date never reads a later date's charges in flight, so its
// count must not replace that run's.
type gaugeDate struct {
	mu   sync.Mutex
	date dates.Date // zero: never set
}

// set calls update when date is on or after the date that last set it.
func (g *gaugeDate) set(date dates.Date, update func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.date.IsZero() && date.Before(g.date) {
		return
	}
	g.date = date
	update()
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

// readShard reads one shard's partitions from from to date, grouped by
// account in order of first appearance.
func (s *Service) readShard(ctx context.Context, index Index, from, date dates.Date, shard int) ([]accountWork, error) {
	var accounts []accountWork
	pos := map[string]int{}
	seen := map[string]bool{}
	for d := from; !d.After(date); d = d.AddDays(1) {
		entries, err := s.store.QueryIndex(ctx, index, s.clock, d, shard)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if seen[e.PK+"|"+e.SK] {
				continue
			}
			seen[e.PK+"|"+e.SK] = true
			acc := e.AccountID
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
				rep.because("account "+w.account, err)
			}
		}
		return nil
	}
	if !locked {
		return each(ctx, nil)
	}
	return s.withLock(ctx, w.account, each)
}

// indexShards is how many index shards a run reads: a test clock's entries
// are all in shard 0 (the store keeps a clock's entries in partitions of its own).
func (s *Service) indexShards() int {
	if s.clock != "" {
		return 1
	}
	return s.store.Shards()
}

// sweepKey is the sweep watermark's key of job: each test clock has its own,
// so an advance never moves the real-time jobs' watermark, nor they its.
func (s *Service) sweepKey(job string) string {
	if s.clock != "" {
		return job + "@" + s.clock
	}
	return job
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
