package thin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/safego"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// HealthResolved is the health event whose object the service re-drives.
const HealthResolved = "v2.core.health.event_generation_failure.resolved"

// Hydration results (the metric's label).
const (
	ResultHydrated  = "hydrated"
	ResultAccount   = "account"
	ResultRedriven  = "redriven"
	ResultUnhandled = "unhandled"
	ResultRetry     = "retry"
	// ResultRefused: the notification disagreed with Stripe's copy of the
	// event; recorded failed, nothing applied.
	ResultRefused = "refused"
)

// HydratorConfig configures the hydrator; zero values take the defaults.
type HydratorConfig struct {
	// Batch is how many jobs are hydrated at once (default 16); a claim
	// takes as many as there are free slots.
	Batch int
	// Lease is how long a claimed job is another hydrator's to skip
	// (default 15 s): a crashed hydrator's jobs come back after it. A live
	// hydrator renews the leases of its jobs every Lease/3 while they run.
	Lease time.Duration
	// JobTimeout bounds one job's hydration (default 2 min).
	JobTimeout time.Duration
	// Idle is how often an idle hydrator looks for due jobs (default 1 s);
	// a received notification wakes it at once.
	Idle time.Duration
	// RetryBase and RetryMax bound the backoff of a failed hydration:
	// RetryBase × 2^(tries-1), at most RetryMax (defaults 2 s and 10 min).
	RetryBase, RetryMax time.Duration
	Livemode            bool
	// PlatformAccount is the account of a record whose event has no
	// context (as the intake files it).
	PlatformAccount string
	Log             *slog.Logger
	Observer        Observer // may be nil
	// Safe recovers a panic in one job's hydration (logged with its stack,
	// counted as thin_hydration): the job is retried later, the other jobs
	// and the loop go on. Nil: a starter that only logs.
	Safe *safego.Starter
	// Problems is the operators' list of failed events (opsdata.Problems;
	// may be nil): a refused notification is put on it, and taken off
	// when its event is hydrated.
	Problems Problems
	Now      func() time.Time
}

// Problems is the operators' list of failed events, as the hydrator feeds it.
type Problems interface {
	Listed(ctx context.Context, r events.Record, outcome, msg string)
	Resolve(ctx context.Context, ids ...string) error
}

// Hydrator hydrates queued thin notifications.
type Hydrator struct {
	cfg      HydratorConfig
	queue    *Queue
	store    Store
	api      StripeAPI
	budget   stripebudget.Budget
	handler  stripeevent.Handler
	registry *Registry
	recorder *Recorder
	wake     chan struct{}
}

// NewHydrator returns a hydrator.
func NewHydrator(cfg HydratorConfig, q *Queue, rec *Recorder, store Store, api StripeAPI, budget stripebudget.Budget, h stripeevent.Handler, reg *Registry) *Hydrator {
	if cfg.Batch <= 0 {
		cfg.Batch = 16
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 15 * time.Second
	}
	if cfg.JobTimeout <= 0 {
		cfg.JobTimeout = 2 * time.Minute
	}
	if cfg.Idle <= 0 {
		cfg.Idle = time.Second
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = 2 * time.Second
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 10 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Safe = cfg.Safe.OrDefault(cfg.Log)
	return &Hydrator{cfg: cfg, queue: q, recorder: rec, store: store, api: api, budget: budget, handler: h, registry: reg,
		wake: make(chan struct{}, 1)}
}

// Nudge wakes the hydrator (a notification was queued).
func (h *Hydrator) Nudge() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Run hydrates due jobs until ctx ends, up to Batch at once. A slot is
// refilled as soon as its job ends, so a slow or hanging hydration (a
// Stripe timeout) holds only its own slot, never the jobs queued behind
// it. At shutdown the jobs in flight are abandoned to their leases (the
// ledger keeps a half-done one from applying twice) and Run waits for them.
func (h *Hydrator) Run(ctx context.Context) error {
	idle := time.NewTicker(h.cfg.Idle)
	defer idle.Stop()
	beat := time.NewTicker(h.cfg.Lease / 3)
	defer beat.Stop()
	var (
		mu      sync.Mutex
		running = map[string]bool{} // event ids in flight
		wg      sync.WaitGroup
	)
	defer wg.Wait()
	freed := make(chan struct{}, 1)
	purged := time.Time{}
	recordEvery := time.Time{}
	for {
		// Records of notifications not yet claimed, at most every Idle: a
		// claimed job writes its own, reads find them in the queue, and an
		// index listing writes them first; this only keeps the table close.
		if time.Since(recordEvery) >= h.cfg.Idle {
			if _, err := h.recorder.RecordPending(ctx, 100); err != nil && ctx.Err() == nil {
				h.cfg.Log.Warn("thin events: writing queued records failed; they stay readable from the queue", "error", err)
			}
			recordEvery = time.Now()
		}
		if time.Since(purged) > time.Hour {
			if err := h.queue.Purge(ctx); err != nil && ctx.Err() == nil {
				h.cfg.Log.Warn("thin events: purge of hydrated ids failed", "error", err)
			}
			purged = time.Now()
		}
		mu.Lock()
		free := h.cfg.Batch - len(running)
		mu.Unlock()
		if free > 0 {
			jobs, err := h.queue.Claim(ctx, free, h.cfg.Lease)
			if err != nil && ctx.Err() == nil {
				h.cfg.Log.Warn("thin hydration: claim failed", "error", err)
			}
			for _, j := range jobs {
				mu.Lock()
				running[j.EventID] = true
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					jctx, cancel := context.WithTimeout(ctx, h.cfg.JobTimeout)
					defer cancel()
					h.hydrateSafely(jctx, ctx, j)
					mu.Lock()
					delete(running, j.EventID)
					mu.Unlock()
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
			}
			if err == nil && len(jobs) == free {
				continue // more may be due
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-h.wake:
		case <-freed:
		case <-idle.C:
		case <-beat.C:
			// Finished jobs have no lease (deleted or released): only the
			// running ones are renewed.
			mu.Lock()
			ids := make([]string, 0, len(running))
			for id := range running {
				ids = append(ids, id)
			}
			mu.Unlock()
			if len(ids) > 0 {
				if err := h.queue.Extend(context.WithoutCancel(ctx), ids, h.cfg.Lease); err != nil {
					h.cfg.Log.Warn("thin hydration: lease renewal failed", "error", err)
				}
			}
		}
	}
}

// PanicName is the name a panic in one job's hydration is logged and
// counted under (stripe_payments_panics_total{goroutine}).
const PanicName = "thin_hydration"

// hydrateSafely is hydrate with a panic recovered: without it a panic in
// one job ends the process that also takes the webhooks. The job is
// rescheduled with the usual backoff (a job that panics every time neither
// spins nor is lost; its lease would bring it back anyway).
func (h *Hydrator) hydrateSafely(ctx, parent context.Context, j Job) {
	err := h.cfg.Safe.Do(PanicName, func() error { h.hydrate(ctx, parent, j); return nil })
	if err == nil || parent.Err() != nil {
		return
	}
	log := h.cfg.Log.With("event_id", j.EventID, "event_type", j.Type, "stripe_account", j.Context, "attempt", j.Attempts)
	_ = h.cfg.Safe.Do(PanicName, func() error { h.retry(ctx, log, j, err); return nil })
}

// hydrate processes one job and settles it: done, or retried later.
// parent is the hydrator's context: when it has ended (shutdown) a failed
// job is left to its lease.
func (h *Hydrator) hydrate(ctx, parent context.Context, j Job) {
	log := h.cfg.Log.With("event_id", j.EventID, "event_type", j.Type, "stripe_account", j.Context, "attempt", j.Attempts)
	if !j.Recorded {
		// ThinDone and ThinRetry update the record: it must be there.
		if err := h.recorder.write(ctx, []Job{j}); err != nil {
			if parent.Err() == nil {
				h.retry(ctx, log, j, fmt.Errorf("record thin event: %w", err))
			}
			return
		}
	}
	done, err := h.process(ctx, j)
	if err != nil && parent.Err() != nil {
		log.Info("thin event hydration abandoned at shutdown; its lease brings it back", "error", err)
		return
	}
	var ref *refusal
	if errors.As(err, &ref) {
		h.refuse(ctx, log, j, ref)
		return
	}
	if err != nil {
		h.retry(ctx, log, j, err)
		return
	}
	if h.cfg.Problems != nil {
		// Listed if a notification of this id was refused before; a no-op
		// delete by key otherwise. Before the record says hydrated, so that
		// a reader who sees it hydrated never finds it still on the failed
		// list (if the record's write then fails, the retry hydrates it).
		if err := h.cfg.Problems.Resolve(ctx, j.EventID); err != nil {
			log.Warn("thin event hydrated; still on the failed list", "error", err)
		}
	}
	if err := h.store.ThinDone(ctx, j.EventID, done.record, h.cfg.Now()); err != nil {
		h.retry(ctx, log, j, fmt.Errorf("record hydrated thin event: %w", err))
		return
	}
	if err := h.queue.Done(ctx, j.EventID); err != nil {
		// The record is processed; the job comes back after its lease and
		// finds the snapshot a duplicate.
		log.Warn("thin event hydrated but still queued", "error", err)
	}
	h.cfg.Observer.ThinHydrated(done.result, h.cfg.Now().Sub(j.ReceivedAt))
	if done.result == ResultRedriven {
		h.cfg.Observer.ThinHealth(done.record.Severity)
	}
	log.Info("thin event hydrated", "result", done.result, "snapshot_event", done.record.SnapshotEvent,
		"severity", done.record.Severity)
}

// refuse records a notification that disagreed with Stripe's copy of its
// event as failed, naming the difference, and drops its job: it applied
// nothing and is not retried.
func (h *Hydrator) refuse(ctx context.Context, log *slog.Logger, j Job, ref *refusal) {
	log.Warn("thin notification refused: it disagrees with Stripe's copy of the event; nothing applied", "error", ref.Error())
	if err := h.store.ThinRefused(ctx, j.EventID, ref.Error(), j.Attempts); err != nil {
		// Not recorded: leave the job to its lease, to be refused again.
		log.Warn("thin event: refusal not recorded", "error", err)
		return
	}
	if h.cfg.Problems != nil {
		account := j.Context
		if account == "" {
			account = h.cfg.PlatformAccount
		}
		h.cfg.Problems.Listed(ctx, events.Record{ID: j.EventID, Type: j.Type, StripeAccount: account}, "failed", ref.Error())
	}
	if err := h.queue.Drop(ctx, j.EventID); err != nil {
		log.Warn("thin event refused but still queued; its lease brings it back", "error", err)
	}
	h.cfg.Observer.ThinHydrated(ResultRefused, 0)
}

// retry records the failure on the thin record and reschedules the job.
func (h *Hydrator) retry(ctx context.Context, log *slog.Logger, j Job, cause error) {
	wait := h.cfg.RetryBase << min(max(j.Attempts-1, 0), 20)
	if wait > h.cfg.RetryMax || wait <= 0 {
		wait = h.cfg.RetryMax
	}
	var ae *APIError
	if errors.As(cause, &ae) && ae.Status == http.StatusTooManyRequests {
		h.budget.Throttled(ae.RetryAfter)
		wait = max(wait, ae.RetryAfter)
	}
	log.Warn("thin event hydration failed; it will be retried", "error", cause, "retry_in", wait)
	h.cfg.Observer.ThinHydrated(ResultRetry, 0)
	if err := h.store.ThinRetry(ctx, j.EventID, cause.Error(), j.Attempts); err != nil {
		log.Warn("thin event: last_error not recorded", "error", err)
	}
	if err := h.queue.Retry(ctx, j.EventID, cause.Error(), h.cfg.Now().Add(wait)); err != nil {
		log.Warn("thin event: retry not scheduled; its lease brings it back", "error", err)
	}
}

// refusal is a notification that disagrees with Stripe's copy of its
// event: it is recorded failed and applies nothing. Retrying would fetch
// the same copy, so it is not retried; Stripe's own delivery of the event
// is hydrated as any other.
type refusal struct{ differences []string }

func (r *refusal) Error() string {
	return "the notification disagrees with Stripe's copy of the event: " + strings.Join(r.differences, "; ")
}

// hydrated is what a successful hydration settles.
type hydrated struct {
	result string
	record events.ThinHydrated
}

// process hydrates one job. Everything it applies (type, created, context,
// related object, data, snapshot event) comes from Stripe's copy of the
// event; the notification only says which event to fetch, and a
// notification that says anything else than the copy is a *refusal.
func (h *Hydrator) process(ctx context.Context, j Job) (hydrated, error) {
	n, err := stripeevent.ParseThin(j.Payload)
	if err != nil {
		return hydrated{}, fmt.Errorf("queued payload: %w", err)
	}
	if err := h.budget.Wait(ctx, stripebudget.Hydration); err != nil {
		return hydrated{}, err
	}
	raw, err := h.api.V2Event(ctx, n.ID, n.Context)
	if err != nil {
		return hydrated{}, fmt.Errorf("retrieve thin event: %w", err)
	}
	c, err := stripeevent.ParseThinCopy(raw)
	if err != nil {
		return hydrated{}, fmt.Errorf("retrieve thin event: Stripe's copy: %w", err)
	}
	if c.ID != n.ID {
		return hydrated{}, fmt.Errorf("retrieve thin event: Stripe answered event %q", truncate(c.ID, 64))
	}
	if diff := stripeevent.Disagreements(n, c.Thin); len(diff) > 0 {
		return hydrated{}, &refusal{differences: diff}
	}
	account := c.Context
	if account == "" {
		account = h.cfg.PlatformAccount
	}
	out := hydrated{record: events.ThinHydrated{Type: c.Type, StripeAccount: account, Created: c.Created,
		RelatedObject: c.RelatedObject.ID, Hydration: events.HydrationHydrated}}
	source := stripeevent.Source(j.Source)
	switch {
	case c.V1():
		out.result = ResultHydrated
		out.record.SnapshotEvent, err = h.snapshot(ctx, c, source)
	case isAccountEvent(c.Type):
		out.result = ResultAccount
		err = h.account(ctx, c.Thin)
	case c.Type == HealthResolved:
		out.result = ResultRedriven
		var health stripeevent.HealthResolved
		health, err = h.redrive(ctx, c, source)
		out.record.Severity, out.record.RelatedObject = health.Severity, health.RelatedObject.ID
	default:
		out.result, out.record.Hydration = ResultUnhandled, events.HydrationUnhandled
	}
	return out, err
}

// snapshot fetches the snapshot event Stripe's copy c of a v1 thin event
// names and hands it to the one handler, keyed by its own id.
func (h *Hydrator) snapshot(ctx context.Context, c stripeevent.ThinCopy, source stripeevent.Source) (string, error) {
	id := c.SnapshotEvent
	if !stripeid.Valid(id, "evt_") {
		return "", fmt.Errorf("thin event names no snapshot_event (got %q)", truncate(id, 64))
	}
	if err := h.budget.Wait(ctx, stripebudget.Hydration); err != nil {
		return "", err
	}
	payload, err := h.api.V1Event(ctx, id, c.Context)
	if err != nil {
		return "", fmt.Errorf("retrieve snapshot event: %w", err)
	}
	ev, err := stripeevent.Parse(payload)
	if err != nil {
		return "", fmt.Errorf("snapshot event %s: %w", id, err)
	}
	if ev.ID != id {
		return "", fmt.Errorf("retrieve snapshot event: Stripe answered event %q for %s", truncate(ev.ID, 64), id)
	}
	if string(ev.Type) != c.SnapshotType() {
		return "", fmt.Errorf("snapshot event %s is %s, the thin event %s", id, truncate(string(ev.Type), 64), c.Type)
	}
	if ev.Account == "" && c.Context != "" {
		// Listed on a connected account without its `account`: it is that
		// account's (as the poller files such events).
		ev.Account = c.Context
	}
	outcome, err := h.handler.Handle(ctx, ev, payload, source)
	if err != nil {
		return "", fmt.Errorf("process snapshot event %s: %w", id, err)
	}
	if outcome == stripeevent.Failed {
		return "", fmt.Errorf("process snapshot event %s: failed", id)
	}
	return id, nil
}

// isAccountEvent: v2.core.account.created|updated|closed and
// v2.core.account[...].updated.
func isAccountEvent(typ string) bool {
	switch typ {
	case "v2.core.account.created", "v2.core.account.updated", "v2.core.account.closed":
		return true
	}
	return strings.HasPrefix(typ, "v2.core.account[") && strings.HasSuffix(typ, "].updated")
}

// account keeps the registry: the related object (of Stripe's copy t) is
// the account.
func (h *Hydrator) account(ctx context.Context, t stripeevent.Thin) error {
	id := t.RelatedObject.ID
	if !stripeid.Valid(id, "acct_") {
		return fmt.Errorf("%s names no account (related_object %q)", t.Type, truncate(id, 64))
	}
	if t.Type == "v2.core.account.closed" {
		return h.registry.Close(ctx, id, t.ID, t.Created)
	}
	return h.registry.Open(ctx, id, t.ID, t.Created)
}
