package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/lease"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Observer is told of every difference found (metrics).
type Observer interface {
	DriftFound(kind string)
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// Lease and Poll: see lease.Config (0: 30 s and 2 s).
	Lease, Poll time.Duration
	Log         *slog.Logger
	Observer    Observer // nil: none
	// APIVersion is what the snapshot events say they are (default
	// stripe-go's, the version the handler reads).
	APIVersion string
	// Now replaces time.Now (the snapshots' date).
	Now func() time.Time
	// Batch is how many items are read from Stripe together (0: 100).
	Batch int
	// Accounts closes deauthorized accounts (nil: such a finding fails).
	Accounts AccountCloser
	// InFlightMinAge: a billing attempt in flight sent more recently is
	// not resolved (0: DefaultInFlightMinAge).
	InFlightMinAge time.Duration
}

// DefaultInFlightMinAge is how old an attempt whose outcome is unknown must
// be before a run asks Stripe about it: a younger one may still be running
// at Stripe (a request timed out on our side goes on there), and the next
// collection run resends it with its key anyway.
const DefaultInFlightMinAge = 5 * time.Minute

// lockWait is how long a run waits for an account's billing lock (a
// collection run holds it) before it leaves the item to the next run.
const lockWait = 30 * time.Second

// Settler settles billing attempts (billing.Service): from a snapshot
// event as the webhook feed would, or, for an attempt whose outcome is
// unknown, by asking Stripe as the collection run would.
type Settler interface {
	SettleFromStripe(ctx context.Context, ev *stripe.Event, wait time.Duration) (applies bool, err error)
	ResolveInFlight(ctx context.Context, req billing.InFlightRequest) (billing.Resolution, error)
}

// Runner carries out runs: compares each item with Stripe and heals
// through the one handler (a purchase's objects) or the billing core's
// feed (a billing attempt).
type Runner struct {
	store   *Store
	stripe  StripeReader
	handler stripeevent.Handler
	settler Settler
	cfg     RunnerConfig
	lease   *lease.Runner
}

// NewRunner returns a Runner; settler may be nil when the store has no
// billing periods.
func NewRunner(store *Store, sr StripeReader, h stripeevent.Handler, settler Settler, cfg RunnerConfig) *Runner {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.APIVersion == "" {
		cfg.APIVersion = stripe.APIVersion
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.InFlightMinAge <= 0 {
		cfg.InFlightMinAge = DefaultInFlightMinAge
	}
	l := lease.New(store.pool, lease.Config{Table: "reconciliations", What: "reconciliation", Name: "reconciliation",
		Lease: cfg.Lease, Poll: cfg.Poll, Log: cfg.Log})
	return &Runner{store: store, stripe: sr, handler: h, settler: settler, cfg: cfg, lease: l}
}

// Nudge wakes the runner: a run was started.
func (r *Runner) Nudge() { r.lease.Nudge() }

// Run works until ctx ends.
func (r *Runner) Run(ctx context.Context) { r.lease.Run(ctx, r.RunOnce, nil) }

// RunOnce claims one running run nobody holds and carries it out to its
// end (or until ctx ends or the lease is lost). worked is false when there
// was none.
func (r *Runner) RunOnce(ctx context.Context) (worked bool, err error) {
	id, err := r.lease.Claim(ctx)
	if err != nil || id == "" {
		return false, err
	}
	// Every Stripe request of the run, the reads and what healing asks
	// (an invoice the handler expands, the billing feed's checks), draws
	// on the shared budget at the background class (docs/design.md §9).
	ctx = stripebudget.WithClass(ctx, stripebudget.Background)
	run, err := r.store.Get(ctx, id)
	if err != nil {
		return true, err
	}
	log := r.cfg.Log.With("reconciliation", id, "dry_run", run.DryRun)
	log.Info("reconciliation running", "matched", run.Matched, "checked", run.Checked)
	for {
		items, err := r.store.pending(ctx, id, r.cfg.Batch)
		if err != nil {
			return true, err
		}
		if len(items) == 0 {
			return true, r.finish(ctx, log, id)
		}
		for len(items) > 0 {
			group := sameAccount(items)
			items = items[len(group):]
			objects, ferr := r.fetch(ctx, group)
			for _, it := range group {
				if ctx.Err() != nil {
					// Stopping: the item is compared again after the restart.
					return true, ctx.Err()
				}
				res := r.check(ctx, run, it, objects, ferr)
				held, err := r.record(ctx, id, it, res)
				if err != nil {
					return true, err
				}
				if !held {
					return true, fmt.Errorf("reconciliation %s: lease lost to another runner", id)
				}
				if res.finding != nil {
					log.Warn("reconciliation: drift", "kind", it.kind, "object", it.objectID, "stripe_account", it.stripeAccount,
						"local", res.finding.Local, "stripe", res.finding.Stripe, "action", res.finding.Action, "outcome", res.outcome)
				}
			}
		}
	}
}

// sameAccount is the leading items of one account and kind (the store
// orders them so).
func sameAccount(items []item) []item {
	n := 1
	for n < len(items) && items[n].stripeAccount == items[0].stripeAccount && items[n].kind == items[0].kind {
		n++
	}
	return items[:n]
}

// fetch reads a group's objects from Stripe: one listing over the
// creation window of the group's purchases when there are several, then a
// retrieve of each one the listing did not hold (created outside the
// window, or on the listing's edge).
func (r *Runner) fetch(ctx context.Context, group []item) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	// An attempt in flight has no object to read: the resolver asks Stripe.
	group = slices.DeleteFunc(slices.Clone(group), inFlight)
	if len(group) == 0 {
		return out, nil
	}
	if len(group) > 1 && group[0].kind != KindAccount { // Stripe lists no connected accounts by creation for this
		from, to := group[0].created, group[0].created
		for _, it := range group {
			from, to = minTime(from, it.created), maxTime(to, it.created)
		}
		// A purchase's objects are created right after its row; an hour on
		// each side covers clocks, a day after covers a late invoice.
		listed, err := r.stripe.List(ctx, group[0].kind, group[0].stripeAccount, from.Add(-time.Hour), to.Add(24*time.Hour))
		if err != nil {
			return nil, err
		}
		out = listed
	}
	for _, it := range group {
		if _, ok := out[it.objectID]; ok {
			continue
		}
		raw, err := r.stripe.Retrieve(ctx, it.kind, it.stripeAccount, it.objectID)
		if err != nil {
			return nil, err
		}
		if raw != nil {
			out[it.objectID] = raw
		}
	}
	return out, nil
}

// result is one item's outcome.
type result struct {
	outcome string
	finding *Finding
}

// check compares one item and, unless the run is a dry run, heals it.
func (r *Runner) check(ctx context.Context, run Run, it item, objects map[string]json.RawMessage, fetchErr error) result {
	now := r.cfg.Now().UTC()
	fail := func(local, stripeState, action string, err error) result {
		return result{outcome: OutcomeFailed, finding: &Finding{Object: it.objectID, Kind: it.kind, StripeAccount: it.stripeAccount,
			Local: local, Stripe: stripeState, Action: action, Error: clipErr(err), At: now}}
	}
	if inFlight(it) {
		// Nothing was read for it: the resolver reads the period and asks
		// Stripe itself.
		return r.checkInFlight(ctx, run, it, now)
	}
	l, err := r.store.local(ctx, it)
	if err != nil {
		return fail("unknown", "unknown", "none: the local state could not be read", err)
	}
	if fetchErr != nil {
		return fail(l.String(it.kind), "unknown", "none: Stripe could not be read; the next run compares it again", fetchErr)
	}
	raw, ok := objects[it.objectID]
	if it.kind == KindAccount {
		return r.checkAccount(ctx, run, it, l, ok, now)
	}
	if !ok {
		return result{outcome: OutcomeDrift, finding: &Finding{Object: it.objectID, Kind: it.kind, StripeAccount: it.stripeAccount,
			Local: l.String(it.kind), Stripe: "no such object on this account", Action: "none: nothing to heal from", At: now}}
	}
	var obj stripeObject
	if err := json.Unmarshal(raw, &obj); err != nil || obj.ID != it.objectID {
		return fail(l.String(it.kind), "unreadable", "none", errors.Join(errors.New("Stripe's object is not the one asked for"), err))
	}
	d, found := compare(it.kind, l, obj)
	if !found {
		return result{outcome: OutcomeInSync}
	}
	if r.cfg.Observer != nil {
		r.cfg.Observer.DriftFound(it.kind)
	}
	f := &Finding{Object: it.objectID, Kind: it.kind, StripeAccount: it.stripeAccount, Local: l.String(it.kind), Stripe: d.stripeState, At: now}
	if run.DryRun {
		f.Action = "none (dry run): would hand the handler " + d.eventType
		return result{outcome: OutcomeDrift, finding: f}
	}
	payload, err := snapshot(it.stripeAccount, d.eventType, r.cfg.APIVersion, raw, obj, now)
	if err != nil {
		return fail(f.Local, f.Stripe, "none", err)
	}
	ev, err := stripeevent.Parse(payload)
	if err != nil {
		return fail(f.Local, f.Stripe, "none", err)
	}
	if it.kind == KindBillingAttempt {
		err = r.settle(ctx, ev)
		f.Action = fmt.Sprintf("settled the period from %s %s through the billing feed", d.eventType, ev.ID)
	} else {
		var outcome stripeevent.Outcome
		outcome, err = r.handler.Handle(ctx, ev, payload, stripeevent.SourceReplay)
		f.Action = fmt.Sprintf("handed %s %s to the handler: %s", d.eventType, ev.ID, outcome)
	}
	if err != nil {
		f.Error = clipErr(err)
		return result{outcome: OutcomeFailed, finding: f}
	}
	after, err := r.store.local(ctx, it)
	if err != nil {
		f.Error = clipErr(err)
		return result{outcome: OutcomeFailed, finding: f}
	}
	if _, still := compare(it.kind, after, obj); still {
		// The rules refused to move it (an object of another account, a
		// purchase its metadata does not name, a billing charge that fails
		// the feed's trust checks): an operator looks.
		f.Error = "the rules left the state as it was: " + after.String(it.kind)
		return result{outcome: OutcomeFailed, finding: f}
	}
	return result{outcome: OutcomeHealed, finding: f}
}

// inFlight: the item is a billing attempt whose outcome is unknown, named
// by its idempotency key.
func inFlight(it item) bool {
	return it.kind == KindBillingAttempt && billing.IsAttemptKey(it.objectID)
}

// checkInFlight resolves a billing attempt whose outcome is unknown through
// the billing core's resolver (billing.Service.ResolveInFlight): under the
// account's lock, as the collection would, never charging. A dry run only
// asks Stripe. An attempt younger than InFlightMinAge, or settled since the
// run listed it, is no difference.
func (r *Runner) checkInFlight(ctx context.Context, run Run, it item, now time.Time) result {
	f := &Finding{Object: it.objectID, Kind: it.kind, StripeAccount: it.stripeAccount, Local: "attempt outcome unknown", At: now}
	if r.settler == nil {
		f.Stripe, f.Action, f.Error = "unknown", "none", "no billing core in this process to resolve the attempt"
		return result{outcome: OutcomeFailed, finding: f}
	}
	account, sub, d, err := parsePeriodRef(it.period)
	if err != nil {
		f.Stripe, f.Action, f.Error = "unknown", "none", clipErr(err)
		return result{outcome: OutcomeFailed, finding: f}
	}
	res, err := r.settler.ResolveInFlight(ctx, billing.InFlightRequest{Account: account, Subscription: sub, BillingDate: d,
		Key: it.objectID, MinAge: r.cfg.InFlightMinAge, DryRun: run.DryRun, Wait: lockWait})
	if res.Attempt > 0 {
		f.Local = fmt.Sprintf("attempt %d outcome unknown (sent %s)", res.Attempt, res.Since.UTC().Format(time.RFC3339))
	}
	if err != nil {
		f.Stripe, f.Action, f.Error = res.Stripe, "none: the next run asks again", clipErr(err)
		if f.Stripe == "" {
			f.Stripe = "unknown"
		}
		return result{outcome: OutcomeFailed, finding: f}
	}
	switch res.Outcome {
	case billing.ResolveNotInFlight, billing.ResolveTooYoung:
		return result{outcome: OutcomeInSync}
	}
	if r.cfg.Observer != nil {
		r.cfg.Observer.DriftFound(it.kind)
	}
	f.Stripe, f.Action = res.Stripe, res.Action
	if res.Outcome == billing.ResolveSettled {
		return result{outcome: OutcomeHealed, finding: f}
	}
	return result{outcome: OutcomeDrift, finding: f}
}

// AccountCloser records that the poller stops walking an account
// (thin.Registry.Close: what an Accounts v2 account.closed event does).
type AccountCloser interface {
	Close(ctx context.Context, account, eventID string, eventAt time.Time) error
}

// checkAccount compares a connected account: one Stripe no longer lets the
// platform read (deauthorized) is closed in the poller's registry, so the
// poller stops walking it once the registry's grace has passed. The
// handler has no rule for accounts (their v2 events go to the registry
// too), so this is the one change made outside it; the event id it records
// is the snapshot's, stable for the state.
func (r *Runner) checkAccount(ctx context.Context, run Run, it item, l localState, found bool, now time.Time) result {
	if found || l.closed {
		return result{outcome: OutcomeInSync}
	}
	if r.cfg.Observer != nil {
		r.cfg.Observer.DriftFound(it.kind)
	}
	f := &Finding{Object: it.objectID, Kind: it.kind, StripeAccount: it.stripeAccount, Local: l.String(it.kind),
		Stripe: "access revoked: the platform may no longer read the account (deauthorized)", At: now}
	if run.DryRun {
		f.Action = "none (dry run): would stop polling the account"
		return result{outcome: OutcomeDrift, finding: f}
	}
	id := snapshotID(it.objectID, "account.application.deauthorized", stripeObject{ID: it.objectID, Status: "revoked"})
	if r.cfg.Accounts == nil {
		f.Error = "no account registry in this process"
		return result{outcome: OutcomeFailed, finding: f}
	}
	f.Action = "closed in the poller's account registry (" + id + "): no longer polled after its grace period"
	if err := r.cfg.Accounts.Close(ctx, it.objectID, id, now); err != nil {
		f.Error = clipErr(err)
		return result{outcome: OutcomeFailed, finding: f}
	}
	return result{outcome: OutcomeHealed, finding: f}
}

// settle applies a billing attempt's snapshot through the billing core's
// feed: the same trust checks and transitions as the webhook's event.
func (r *Runner) settle(ctx context.Context, ev *stripe.Event) error {
	if r.settler == nil {
		return errors.New("no billing core in this process to settle the attempt")
	}
	applies, err := r.settler.SettleFromStripe(ctx, ev, 30*time.Second)
	if err == nil && !applies {
		err = errors.New("the PaymentIntent carries no billing period in its metadata")
	}
	return err
}

// record writes an item's outcome, its finding and the counters in one
// transaction, and renews the lease; held is false when another runner
// holds the run now.
func (r *Runner) record(ctx context.Context, id string, it item, res result) (held bool, err error) {
	drifted, healed, failed := 0, 0, 0
	switch res.outcome {
	case OutcomeHealed:
		drifted, healed = 1, 1
	case OutcomeDrift:
		drifted = 1
	case OutcomeFailed:
		failed = 1
		if res.finding != nil && res.finding.Stripe != "unknown" && res.finding.Stripe != "unreadable" {
			drifted = 1 // a difference found that could not be healed
		}
	}
	err = pgx.BeginFunc(ctx, r.store.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE reconciliations SET checked = checked + 1, drifted = drifted + $3, healed = healed + $4,
				failed = failed + $5, leased_until = now() + $6::interval
			WHERE id = $1 AND lease_owner = $2 AND status = 'running'`, id, r.lease.Owner(), drifted, healed, failed, r.lease.Interval())
		if err != nil {
			return fmt.Errorf("reconciliation %s: record progress: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		tag, err = tx.Exec(ctx, `UPDATE reconcile_items SET outcome = $3 WHERE reconciliation_id = $1 AND seq = $2 AND outcome IS NULL`,
			id, it.seq, res.outcome)
		if err != nil {
			return fmt.Errorf("reconciliation %s: record item %d: %w", id, it.seq, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("reconciliation %s: item %d recorded twice", id, it.seq)
		}
		if f := res.finding; f != nil {
			var errText any
			if f.Error != "" {
				errText = f.Error
			}
			if _, err := tx.Exec(ctx, `INSERT INTO reconcile_findings (reconciliation_id, seq, kind, object_id, stripe_account,
					local_state, stripe_state, action, error, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
				id, it.seq, f.Kind, f.Object, f.StripeAccount, f.Local, f.Stripe, f.Action, errText, f.At); err != nil {
				return fmt.Errorf("reconciliation %s: record finding %d: %w", id, it.seq, err)
			}
		}
		held = true
		return nil
	})
	return held, err
}

func (r *Runner) finish(ctx context.Context, log *slog.Logger, id string) error {
	run, err := scanRun(r.store.pool.QueryRow(ctx, `UPDATE reconciliations SET status = 'done', finished_at = now(), lease_owner = NULL, leased_until = NULL
		WHERE id = $1 AND lease_owner = $2 AND status = 'running' RETURNING `+runColumns, id, r.lease.Owner()))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // taken over
	}
	if err != nil {
		return fmt.Errorf("reconciliation %s: finish: %w", id, err)
	}
	log.Info("reconciliation done", "matched", run.Matched, "checked", run.Checked, "drifted", run.Drifted,
		"healed", run.Healed, "failed", run.Failed)
	return nil
}

func clipErr(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 1000 {
		s = s[:1000]
	}
	return s
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
