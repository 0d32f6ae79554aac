// Package jobs runs the billing core's daily jobs (collect, remind): it reads
// the due-date index partitions of a date and the days before it (the
// sweep), shard by shard in parallel, and hands each account's entries to
// the job (which takes the account's lock itself when it charges).
package jobs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/env"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// Runner runs jobs with an Env's collaborators, on its clock.
type Runner struct {
	*env.Env
	// Gauge is shared by every copy of the core: the unresolved gauge is
	// set by the newest date's run only.
	Gauge *Gauge
}

type accountWork struct {
	account string
	entries []model.IndexEntry
}

// AccountFunc acts on the entries of one account a run read (a job takes
// the account's lock itself when it charges).
type AccountFunc func(ctx context.Context, account string, entries []model.IndexEntry, date dates.Date, rep *model.Report) error

// EntryFunc acts on one index entry of an account (EachEntry).
type EntryFunc func(ctx context.Context, e model.IndexEntry, date dates.Date, rep *model.Report) error

// Run runs job for date over index: the index partitions of date and the
// days before it are read shard by shard in parallel, and fn acts on each
// account's entries, WorkersPerShard accounts at a time per shard (as each
// shard's read ends). sweep: the run reaches back to what the last clean
// run left, and moves the sweep watermark when it leaves nothing behind
// (the collection).
func (r *Runner) Run(ctx context.Context, job string, date dates.Date, index model.Index, sweep bool, fn AccountFunc) (*model.Report, error) {
	rep := &model.Report{Job: job, Date: date.String()}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	log := r.Log.With("job", job, "date", date.String())
	start := time.Now()
	from := date.AddDays(-r.Cfg.LookbackDays)
	if sweep {
		var err error
		if from, err = r.sweepFrom(ctx, r.sweepKey(job), date); err != nil {
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
		err := r.Safe.Do("billing_account", func() error { return fn(ctx, w.account, w.entries, date, rep) })
		switch {
		case errors.Is(err, model.ErrLocked):
			mu.Lock()
			retry = append(retry, w)
			mu.Unlock()
		case errors.Is(err, model.ErrCrash):
			cancel(err)
		case err != nil && ctx.Err() == nil:
			log.Error("billing job: account failed", "account", w.account, "error", err)
			rep.Add(func(r *model.Report) { r.Errors++ })
			rep.Because("account "+w.account, err)
		}
	}
	readErr := r.EachAccount(ctx, index, from, date, rep, func(account string, entries []model.IndexEntry) {
		work(accountWork{account: account, entries: entries})
	})
	r.retryLocked(ctx, log, &retry, work)
	rep.Locked = len(retry)
	for _, w := range retry {
		log.Warn("billing job: account locked for the whole run; rerun the job", "account", w.account)
	}
	return rep, r.finish(ctx, log, job, date, sweep, rep, start, readErr)
}

// EachAccount reads every shard's index partitions from from to date in
// parallel and hands each account's entries to work, WorkersPerShard at a
// time per shard (as each shard's read ends); it counts the entries in rep
// and returns the read errors. Run collects through it; the billing queue
// enqueues through it.
func (r *Runner) EachAccount(ctx context.Context, index model.Index, from, date dates.Date, rep *model.Report,
	work func(account string, entries []model.IndexEntry)) error {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		readErr error
	)
	for shard := 0; shard < r.indexShards(); shard++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			accounts, err := r.readShard(ctx, index, from, date, shard)
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
			rep.Add(func(r *model.Report) { r.Entries += n })
			ch := make(chan accountWork)
			var workers sync.WaitGroup
			for range r.Cfg.WorkersPerShard {
				workers.Add(1)
				go func() {
					defer workers.Done()
					for w := range ch {
						work(w.account, w.entries)
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

// SweepFrom is the oldest partition date a swept run of job for date
// reads (sweep.go), on this Runner's clock.
func (r *Runner) SweepFrom(ctx context.Context, job string, date dates.Date) (dates.Date, error) {
	return r.sweepFrom(ctx, r.sweepKey(job), date)
}

// AdvanceSweep moves job's sweep watermark on this Runner's clock to to
// (a run that left nothing behind).
func (r *Runner) AdvanceSweep(ctx context.Context, job string, to dates.Date) error {
	return r.Store.AdvanceSweep(ctx, r.sweepKey(job), to)
}

// SetGauge sets the unresolved-periods gauge from date's run, unless a
// newer date's run set it already (real time only).
func (r *Runner) SetGauge(date dates.Date, unresolved int) {
	if r.Clock == "" {
		r.Gauge.set(date, func() { r.Obs.UnresolvedPeriods(unresolved) })
	}
}

// finish ends a run: the Stripe accounts it charged on registered, the
// sweep ended, the report logged. The error is why the run stopped, if it
// did (a crash, a read error).
func (r *Runner) finish(ctx context.Context, log *slog.Logger, job string, date dates.Date, sweep bool, rep *model.Report,
	start time.Time, readErr error) error {
	r.registerChargedOn(ctx, log, rep)
	if sweep {
		r.endSweep(ctx, log, job, date, rep, readErr)
	}
	log.Info("billing job done", "report", rep.Summary(), "elapsed", time.Since(start).String())
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return readErr
}

// retryLocked works once more, after LockedRetryWait (a lease: enough to
// take over a crashed holder's lock), the accounts found locked; work adds
// the ones still locked to *retry again.
func (r *Runner) retryLocked(ctx context.Context, log *slog.Logger, retry *[]accountWork, work func(accountWork)) {
	if len(*retry) == 0 || r.Cfg.LockedRetryWait <= 0 || ctx.Err() != nil {
		return
	}
	log.Info("billing job: retrying locked accounts after a lease", "accounts", len(*retry), "wait", r.Cfg.LockedRetryWait.String())
	select {
	case <-ctx.Done():
	case <-time.After(r.Cfg.LockedRetryWait):
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
func (r *Runner) registerChargedOn(ctx context.Context, log *slog.Logger, rep *model.Report) {
	accounts := rep.ChargedAccounts()
	if len(accounts) == 0 {
		return
	}
	if err := r.Store.RegisterChargedAccounts(context.WithoutCancel(ctx), accounts...); err != nil {
		log.Warn("billing job: could not register the Stripe accounts charged on (the poller may miss them until the next run)", "error", err)
	}
}

// endSweep ends a collection run: the unresolved-periods gauge, and the
// sweep watermark moved on when the run left nothing behind.
func (r *Runner) endSweep(ctx context.Context, log *slog.Logger, job string, date dates.Date, rep *model.Report, readErr error) {
	if r.Clock == "" { // the gauge is about real time; a clock reports its own runs
		r.Gauge.set(date, func() { r.Obs.UnresolvedPeriods(rep.Unresolved) })
	}
	if readErr == nil && context.Cause(ctx) == nil && rep.OK() {
		// Everything due by date was handled: later runs need not read
		// those partitions again (but for the lookback).
		// Two days back, not one: an entry of the last days may not be
		// due yet in its own time zone (up to 14 h either side of UTC).
		if err := r.Store.AdvanceSweep(context.WithoutCancel(ctx), r.sweepKey(job), date.AddDays(-2)); err != nil {
			log.Warn("billing job: could not advance the sweep watermark (the next run reads further back)", "error", err)
		}
	} else if rep.Unresolved > 0 {
		log.Error("billing job: periods with an unknown outcome are unresolved; rerun the job (docs/runbooks/StripePaymentsBillingUnresolvedCharges.md)", "unresolved", rep.Unresolved)
	}
}

// Gauge keeps the unresolved gauge to the newest date's run: a run
// for an older date never reads a later date's charges in flight, so its
// count must not replace that run's.
type Gauge struct {
	mu   sync.Mutex
	date dates.Date // zero: never set
}

// set calls update when date is on or after the date that last set it.
func (g *Gauge) set(date dates.Date, update func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.date.IsZero() && date.Before(g.date) {
		return
	}
	g.date = date
	update()
}

// readShard reads one shard's partitions from from to date, grouped by
// account in order of first appearance.
func (r *Runner) readShard(ctx context.Context, index model.Index, from, date dates.Date, shard int) ([]accountWork, error) {
	var accounts []accountWork
	pos := map[string]int{}
	seen := map[string]bool{}
	for d := from; !d.After(date); d = d.AddDays(1) {
		entries, err := r.Store.QueryIndex(ctx, index, r.Clock, d, shard)
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

// EachEntry acts with fn on each of an account's entries, without its
// lock (a job that charges nothing).
func (r *Runner) EachEntry(ctx context.Context, account string, entries []model.IndexEntry, date dates.Date, rep *model.Report, fn EntryFunc) error {
	for _, e := range entries {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := fn(ctx, e, date, rep); Fatal(err) {
			return err
		} else if err != nil {
			r.EntryFailed(account, e, err, rep)
		}
	}
	return nil
}

// Fatal reports an error that ends an account's work in a run: the
// process is dying (model.ErrCrash) or the account's lock was lost.
func Fatal(err error) bool {
	return errors.Is(err, model.ErrCrash) || errors.Is(err, lock.ErrNotOwner)
}

// EntryFailed logs and counts an entry whose work failed; the run goes on
// with the account's next entry.
func (r *Runner) EntryFailed(account string, e model.IndexEntry, err error, rep *model.Report) {
	r.Log.Error("billing job: entry failed", "account", account, "sk", e.SK, "error", err)
	rep.Add(func(r *model.Report) { r.Errors++ })
	rep.Because("account "+account, err)
}

// indexShards is how many index shards a run reads: a test clock's entries
// are all in shard 0 (the store keeps a clock's entries in partitions of its own).
func (r *Runner) indexShards() int {
	if r.Clock != "" {
		return 1
	}
	return r.Store.Shards()
}

// sweepKey is the sweep watermark's key of job: each test clock has its own,
// so an advance never moves the real-time jobs' watermark, nor they its.
func (r *Runner) sweepKey(job string) string {
	if r.Clock != "" {
		return job + "@" + r.Clock
	}
	return job
}

// Daily is the billing core's daily jobs on one clock, as package
// testclock runs a test clock's days through them.
type Daily interface {
	// NowDate is the job date of a run without --date.
	NowDate() dates.Date
	Remind(ctx context.Context, date dates.Date) (*model.Report, error)
	Collect(ctx context.Context, date dates.Date) (*model.Report, error)
}
