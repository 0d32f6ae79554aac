package testclock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/jobs"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// AdvanceClock moves clock id to to, running every day's jobs in between.
// It claims the clock with ctx, then advances in the background within life
// (the process's lifetime: the advance outlives the request that started
// it); done closes when the advance ended, however. One advance at a time
// per clock (ErrBusy); a claim whose holder went away (lease expired),
// or a failed advance, is continued from where it stopped.
func (s *Service) AdvanceClock(ctx, life context.Context, id string, to time.Time) (model.Clock, <-chan struct{}, error) {
	if s.livemode() {
		return model.Clock{}, nil, model.ErrLivemode
	}
	c, err := s.store.GetClock(ctx, id)
	if err != nil {
		return model.Clock{}, nil, err
	}
	now := s.wall()
	if c.Status == model.ClockAdvancing && !now.After(c.LeaseUntil) {
		return c, nil, ErrBusy
	}
	if err := checkClockCeiling(to); err != nil {
		return c, nil, err
	}
	to = to.UTC().Truncate(time.Second)
	current := c.FrozenTime
	if c.Status != model.ClockReady {
		current = c.ReachedTime // continuing a stopped advance
	}
	switch {
	case to.IsZero():
		return c, nil, apperr.Invalid("frozen_time: required (RFC 3339)")
	case !to.After(current):
		return c, nil, apperr.Invalid("frozen_time: must be later than the clock's current time %s", current.Format(time.RFC3339))
	case to.After(c.ReachedTime.AddDate(MaxAdvanceYears, 0, 0)):
		return c, nil, apperr.Invalid("frozen_time: at most %d years after the clock's current time", MaxAdvanceYears)
	}
	release, err := s.takeAdvanceSlot()
	if err != nil {
		return c, nil, err
	}
	owner := uuid.NewString()
	c.Status, c.FrozenTime, c.Error = model.ClockAdvancing, to, ""
	c.LeaseOwner, c.LeaseUntil = owner, now.Add(s.cfg.Lease)
	if err := s.store.PutClock(ctx, &c, now); err != nil {
		release()
		if errors.Is(err, model.ErrConflict) {
			return c, nil, ErrBusy // another request claimed it first
		}
		return c, nil, err
	}
	done := make(chan struct{})
	s.advances.Add(1)
	go func() {
		defer s.advances.Done()
		defer close(done)
		defer release()
		err := s.safe.Do("clock_advance", func() error { s.advanceClock(life, c, owner); return nil })
		if err != nil { // a panic: that advance fails, the process goes on
			ctx := context.WithoutCancel(life)
			reached := c.ReachedTime
			if cur, gerr := s.store.GetClock(ctx, c.ID); gerr == nil {
				reached = cur.ReachedTime // as far as the heartbeats recorded
			}
			s.endAdvance(ctx, c.ID, owner, reached, model.ClockFailed, "the advance stopped on an internal error; advance again to continue")
		}
	}()
	return c, done, nil
}

// Wait waits for the advances in flight to stop (cancel their life
// context first).
func (s *Service) Wait() { s.advances.Wait() }

// advanceClock runs the jobs of each day from c.ReachedTime to c.FrozenTime:
// at the same time of day on each following day, then at FrozenTime. Each
// day runs remind then collect for the job date the real ticker would use
// at that time (NowDate: the next UTC date; every subscription acts only
// once its own date came in its time zone).
func (s *Service) advanceClock(ctx context.Context, c model.Clock, owner string) {
	log := s.log.With("test_clock", c.ID)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var hb sync.WaitGroup
	// heartbeat: the claim stays this replica's while it works
	s.safe.Go(ctx, &hb, "clock_heartbeat", func(ctx context.Context) {
		t := time.NewTicker(s.cfg.Lease / 4)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.store.RenewClockLease(ctx, c.ID, owner, time.Time{}, s.wall().Add(s.cfg.Lease), s.wall()); err != nil && ctx.Err() == nil {
					cancel(err)
					return
				}
			}
		}
	})
	defer func() { cancel(nil); hb.Wait() }()

	var at time.Time
	cs := s.billing.DailyOn(c.ID, func() time.Time { return at })
	reached := c.ReachedTime
	// renew keeps the claim and records how far the jobs got: the clock's
	// subscriptions (the webhook feed's included) take today from it. False
	// when the advance must stop (it said so).
	renew := func() bool {
		err := s.store.RenewClockLease(ctx, c.ID, owner, reached, s.wall().Add(s.cfg.Lease), s.wall())
		if err == nil {
			return true
		}
		log.Warn("test clock: advance stopped", "error", err)
		if !errors.Is(err, model.ErrConflict) { // else lost the claim: whoever holds it now goes on
			// Shutting down, or the table failed: say so at once rather
			// than when the lease runs out; the next advance goes on.
			s.endAdvance(context.WithoutCancel(ctx), c.ID, owner, reached, model.ClockFailed, "the advance stopped: "+err.Error())
		}
		return false
	}
	var pending *debits // nil: bank debits are not waited for
	if s.cfg.SettleWait > 0 {
		pending = newDebits(c.ID, c.ReachedTime)
	}
	for k := 1; ; k++ {
		at = c.ReachedTime.AddDate(0, 0, k)
		if !at.Before(c.FrozenTime) {
			at = c.FrozenTime
		}
		run, err := s.clockDay(ctx, c.ID, cs, at)
		if err == nil && pending != nil && (k == 1 || run.Processing > 0) {
			err = s.refreshDebits(ctx, pending) // the debits submitted before this advance, or this day
		}
		if err != nil {
			run.Error = err.Error()
			if perr := s.store.PutClockRun(context.WithoutCancel(ctx), c.ID, run); perr != nil {
				log.Warn("test clock: could not record a run", "error", perr)
			}
			log.Error("test clock: advance stopped", "at", at.Format(time.RFC3339), "error", err)
			s.endAdvance(context.WithoutCancel(ctx), c.ID, owner, reached, model.ClockFailed, err.Error())
			return
		}
		reached = at
		if due := pending.due(at); len(due) > 0 {
			if !renew() { // the clock stands on this day while it waits
				return
			}
			run.DebitsSettled, run.DebitsUnsettled = s.awaitSettlements(ctx, due)
			if run.DebitsUnsettled > 0 {
				log.Warn("test clock: bank debits did not settle in time; the advance goes on",
					"at", at.Format(time.RFC3339), "unsettled", run.DebitsUnsettled, "waited", s.cfg.SettleWait.String())
			}
		}
		if run.Entries > 0 || run.DebitsSettled > 0 || run.DebitsUnsettled > 0 {
			if perr := s.store.PutClockRun(context.WithoutCancel(ctx), c.ID, run); perr != nil {
				log.Warn("test clock: could not record a run", "error", perr)
			}
		}
		if at.Equal(c.FrozenTime) {
			break
		}
		if !renew() {
			return
		}
	}
	s.endAdvance(context.WithoutCancel(ctx), c.ID, owner, reached, model.ClockReady, "")
}

// clockDay runs one day's jobs on cs, the clock's billing service, its now at.
func (s *Service) clockDay(ctx context.Context, clock string, cs jobs.Daily, at time.Time) (model.ClockRun, error) {
	date := cs.NowDate()
	run := model.ClockRun{Time: at, Date: date}
	var errs []error
	jobs := []struct {
		name string
		run  func(context.Context, dates.Date) (*model.Report, error)
	}{{"remind", cs.Remind}, {"collect", cs.Collect}}
	for _, job := range jobs {
		started := s.wall()
		rep, err := s.untilUnlocked(ctx, job.run, date)
		s.recordRun(ctx, clock, job.name, date, started, rep, err)
		if rep != nil {
			run.Entries += rep.Entries
			run.Reminded += rep.Reminded
			run.Charged += rep.Succeeded
			run.Processing += rep.Processing
			run.Declined += rep.Declined
			run.Stale += rep.Stale
			run.PausedSkipped += rep.PausedSkipped
			run.Unresolved += rep.Unresolved
			run.Errors += rep.Errors + rep.Locked
		}
		switch {
		case err != nil:
			errs = append(errs, err)
		case !rep.OK():
			errs = append(errs, fmt.Errorf("%s %s did not finish cleanly: %s (%s)", rep.Job, date, rep.Why(), rep.Summary()))
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		run.Error = err.Error()
		return run, err
	}
	return run, nil
}

// recordRun hands a job of a clock's day to the run log when it did or
// found something (a day with nothing due is not worth a row: an advance
// of three years runs over a thousand of them).
func (s *Service) recordRun(ctx context.Context, clock, job string, date dates.Date, started time.Time, rep *model.Report, err error) {
	if s.runs == nil || (err == nil && rep != nil && rep.Entries == 0) {
		return
	}
	if rerr := s.runs.RecordClockRun(context.WithoutCancel(ctx), clock, job, date.Time(), started, rep, err); rerr != nil {
		s.log.Warn("test clock: could not record a run in the run log", "test_clock", clock, "job", job, "error", rerr)
	}
}

// clockLockWait bounds how long a day of an advance waits for accounts
// another holder keeps locked (an API change, the other clock of the same
// account, a crashed holder whose lease must expire).
const clockLockWait = 3 * time.Minute

// untilUnlocked runs job for date again while it only found accounts
// locked, with a short backoff instead of the real jobs' one long wait
// (the clock's billing service has LockedRetryWait 0): a rerun acts on
// what is left, idempotently. The report adds up what the runs did.
func (s *Service) untilUnlocked(ctx context.Context, job func(context.Context, dates.Date) (*model.Report, error), date dates.Date) (*model.Report, error) {
	total := &model.Report{}
	deadline := s.wall().Add(clockLockWait)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		rep, err := job(ctx, date)
		if rep == nil {
			return total, err
		}
		total.Job, total.Date, total.SweptFrom = rep.Job, rep.Date, rep.SweptFrom
		total.Entries = max(total.Entries, rep.Entries)
		total.Reminded += rep.Reminded
		total.Succeeded += rep.Succeeded
		total.Processing += rep.Processing
		total.Declined += rep.Declined
		total.Stale += rep.Stale
		total.PausedSkipped += rep.PausedSkipped
		total.Resumed += rep.Resumed
		total.Unknown += rep.Unknown
		total.Resolved += rep.Resolved
		total.Unresolved, total.Errors, total.Locked = rep.Unresolved, rep.Errors, rep.Locked
		if rep.Queue != nil { // the billing queue's run of the last try
			total.Queue = rep.Queue
		}
		for _, c := range rep.Causes {
			if len(total.Causes) < model.MaxCauses && !slices.Contains(total.Causes, c) {
				total.Causes = append(total.Causes, c)
			}
		}
		if err != nil || rep.Locked == 0 || rep.Errors > 0 || rep.Unresolved > 0 || s.wall().After(deadline) {
			return total, err
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// endAdvance records the end of owner's advance: ready at the target, or
// failed at reached.
func (s *Service) endAdvance(ctx context.Context, id, owner string, reached time.Time, status model.ClockStatus, msg string) {
	for range 5 {
		c, err := s.store.GetClock(ctx, id)
		if err != nil || c.LeaseOwner != owner {
			return // deleted, or taken over
		}
		c.Status, c.ReachedTime, c.Error = status, reached, msg
		if status == model.ClockReady {
			c.FrozenTime = reached
		}
		c.LeaseOwner, c.LeaseUntil = "", time.Time{}
		err = s.store.PutClock(ctx, &c, s.wall())
		if !errors.Is(err, model.ErrConflict) {
			if err != nil {
				s.log.Error("test clock: could not record the end of an advance", "test_clock", id, "error", err)
			}
			return
		}
	}
}
