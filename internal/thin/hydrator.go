package thin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
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
	Log                 *slog.Logger
	Observer            Observer // may be nil
	Now                 func() time.Time
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
					h.hydrate(jctx, ctx, j)
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
	result, snapshot, err := h.process(ctx, j)
	if err != nil && parent.Err() != nil {
		log.Info("thin event hydration abandoned at shutdown; its lease brings it back", "error", err)
		return
	}
	if err != nil {
		h.retry(ctx, log, j, err)
		return
	}
	hydration := events.HydrationHydrated
	if result == ResultUnhandled {
		hydration = events.HydrationUnhandled
	}
	if err := h.store.ThinDone(ctx, j.EventID, snapshot, hydration, h.cfg.Now()); err != nil {
		h.retry(ctx, log, j, fmt.Errorf("record hydrated thin event: %w", err))
		return
	}
	if err := h.queue.Done(ctx, j.EventID); err != nil {
		// The record is processed; the job comes back after its lease and
		// finds the snapshot a duplicate.
		log.Warn("thin event hydrated but still queued", "error", err)
	}
	h.cfg.Observer.ThinHydrated(result, h.cfg.Now().Sub(j.ReceivedAt))
	log.Info("thin event hydrated", "result", result, "snapshot_event", snapshot)
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

// v2Event is what hydration reads of a fetched thin event.
type v2Event struct {
	ID            string                     `json:"id"`
	Type          string                     `json:"type"`
	Context       string                     `json:"context"`
	SnapshotEvent string                     `json:"snapshot_event"`
	RelatedObject *stripeevent.RelatedObject `json:"related_object"`
}

// process hydrates one job; it returns the result and, for a v1 type, the
// snapshot event's id.
func (h *Hydrator) process(ctx context.Context, j Job) (string, string, error) {
	t, err := stripeevent.ParseThin(j.Payload)
	if err != nil {
		return "", "", fmt.Errorf("queued payload: %w", err)
	}
	if err := h.budget.Wait(ctx, stripebudget.Hydration); err != nil {
		return "", "", err
	}
	raw, err := h.api.V2Event(ctx, t.ID, t.Context)
	if err != nil {
		return "", "", fmt.Errorf("retrieve thin event: %w", err)
	}
	var full v2Event
	if err := json.Unmarshal(raw, &full); err != nil {
		return "", "", fmt.Errorf("retrieve thin event: decode: %w", err)
	}
	if full.ID != t.ID {
		return "", "", fmt.Errorf("retrieve thin event: Stripe answered event %q", truncate(full.ID, 64))
	}
	switch {
	case t.V1():
		snap, err := h.snapshot(ctx, t, full, stripeevent.Source(j.Source))
		return ResultHydrated, snap, err
	case isAccountEvent(t.Type):
		return ResultAccount, "", h.account(ctx, t)
	case t.Type == HealthResolved:
		return ResultRedriven, "", h.redrive(ctx, t, full, stripeevent.Source(j.Source))
	default:
		return ResultUnhandled, "", nil
	}
}

// snapshot fetches the snapshot event a v1 thin event names and hands it
// to the one handler, keyed by its own id.
func (h *Hydrator) snapshot(ctx context.Context, t stripeevent.Thin, full v2Event, source stripeevent.Source) (string, error) {
	id := full.SnapshotEvent
	if !stripeid.Valid(id, "evt_") {
		return "", fmt.Errorf("thin event names no snapshot_event (got %q)", truncate(id, 64))
	}
	if err := h.budget.Wait(ctx, stripebudget.Hydration); err != nil {
		return "", err
	}
	payload, err := h.api.V1Event(ctx, id, t.Context)
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
	if string(ev.Type) != t.SnapshotType() {
		return "", fmt.Errorf("snapshot event %s is %s, the thin event %s", id, truncate(string(ev.Type), 64), t.Type)
	}
	if ev.Account == "" && t.Context != "" {
		// Listed on a connected account without its `account`: it is that
		// account's (as the poller files such events).
		ev.Account = t.Context
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

// account keeps the registry: the related object is the account.
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
