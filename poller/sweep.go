package poller

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
)

// Sweep re-drives the events the events table holds as received or failed,
// from their stored payload, whether or not Stripe still lists them (their
// account may be unknown to the AccountSource, unlistable, or the event past
// Stripe's retention). It walks the date/time index over w (default: the
// last Lookback, ending Settle ago), one UTC date at a time, so a window
// across midnight is two queries. Sweeps never move checkpoints.
func (p *Poller) Sweep(ctx context.Context, w Window) (SweepReport, error) {
	start := p.now()
	if w.Since.IsZero() {
		w.Since = start.Add(-p.cfg.Lookback)
	}
	s, _ := p.cfg.backfillSpan(start, w)
	rep := SweepReport{From: s.from, Until: s.until, DryRun: p.cfg.DryRun}
	only := map[string]bool{}
	for _, a := range p.cfg.Accounts {
		only[a] = true
	}
	var errs []error
	for _, d := range s.days() {
		cursor := ""
		for {
			page, err := p.d.Store.ByDate(ctx, d.Date, d.Range, 100, cursor)
			if err != nil {
				errs = append(errs, fmt.Errorf("sweep %s: %w", d.Date, err))
				break
			}
			todo := p.stuck(ctx, page.Records, only, &rep)
			if p.cfg.DryRun {
				rep.WouldReplay = append(rep.WouldReplay, todo...)
			} else {
				p.replayAll(ctx, todo, &rep.Counts)
			}
			if cursor = page.NextCursor; cursor == "" || ctx.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
	}
	rep.Elapsed = p.now().Sub(start)
	if rep.Failed > 0 {
		errs = append(errs, fmt.Errorf("%d stuck event(s) could not be replayed", rep.Failed))
	}
	p.log.Info("stuck sweep done", "from", rep.From, "until", rep.Until, "scanned", rep.Listed,
		"stuck", rep.Unprocessed, "replayed", rep.Replayed, "failed", rep.Failed, "dry_run", rep.DryRun)
	return rep, errors.Join(errs...)
}

// stuck picks the unprocessed records of a page and loads their payloads
// (strongly consistent, which also re-checks the status).
func (p *Poller) stuck(ctx context.Context, recs []events.Record, only map[string]bool, rep *SweepReport) []Candidate {
	var todo []Candidate
	for _, rec := range recs {
		if len(only) > 0 && !only[rec.StripeAccount] {
			continue
		}
		rep.Listed++
		if rec.Status == events.StatusProcessed {
			rep.AlreadyProcessed++
			continue
		}
		full, err := p.d.Store.Get(ctx, rec.ID)
		switch {
		case errors.Is(err, apperr.ErrNotFound):
			continue
		case err != nil:
			rep.Failed++
			p.log.Error("load stuck event failed", "event_id", rec.ID, "stripe_account", rec.StripeAccount, "error", err)
			continue
		case full.Status == events.StatusProcessed:
			rep.AlreadyProcessed++
			continue
		case len(full.Payload) == 0:
			rep.Unprocessed++
			rep.Failed++
			p.log.Error("stuck event has no stored payload; re-send it from the Stripe dashboard",
				"event_id", rec.ID, "stripe_account", rec.StripeAccount)
			continue
		}
		rep.Unprocessed++
		todo = append(todo, Candidate{ID: full.ID, Type: full.Type, Account: full.StripeAccount,
			Created: full.Created, Reason: Reason(full.Status), Payload: full.Payload})
	}
	return todo
}
