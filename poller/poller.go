// Package poller finds the events the service missed or never finished and
// replays them through the one event handler (docs/design.md §7).
//
// For the platform and every connected account it knows, it lists events
// from the Stripe Events API in a window that overlaps the account's last
// checkpoint, diffs them against the events table (an event is skipped only
// if it is recorded and processed), and replays the rest oldest first,
// either by signing them with the endpoint secret and POSTing them to the
// webhook endpoint, or in-process. The checkpoint then advances over the
// prefix of the window that was fully handled.
//
// The package depends on small interfaces (the events store's reads, a
// checkpoint store, an account source, a replayer); cmd and internal/app wire
// the DynamoDB and Postgres implementations.
package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Poller reconciles the service's events with the Stripe Events API.
type Poller struct {
	cfg Config
	d   Deps
	log *slog.Logger
	now func() time.Time

	mu    sync.Mutex
	rates map[string]listRates // by account: what its last listings held
}

// Listing is which Events API listing a run used for an account.
type Listing string

// Listings.
const (
	// ListFull lists every event of the window (GET /v1/events): it sees
	// everything, and only it moves the checkpoint.
	ListFull Listing = "full"
	// ListUndelivered lists only the events whose webhook delivery has
	// not succeeded (GET /v1/events?delivery_success=false): pending, or
	// failed to an endpoint. An event Stripe delivered with a 2xx is
	// recorded (the webhook answers 2xx only after the durable commit), so
	// between full listings this finds the webhook gap for fewer calls.
	ListUndelivered Listing = "undelivered"
)

// listRates are an account's events per second of window, as its last full
// and undelivered listings found them (this process's memory: a restart
// starts with full listings).
type listRates struct {
	full, undelivered         float64
	knowFull, knowUndelivered bool
}

// ErrBusy is returned when another checkpointed run holds the lock.
var ErrBusy = errors.New("another poller run holds the lock")

// New returns a poller.
func New(cfg Config, d Deps) (*Poller, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("poller config: %w", err)
	}
	switch {
	case d.API == nil, d.Store == nil, d.Checkpoints == nil, d.Replayer == nil, d.Log == nil:
		return nil, errors.New("poller: API, Store, Checkpoints, Replayer and Log are required")
	case d.Accounts == nil && len(cfg.Accounts) == 0:
		return nil, errors.New("poller: an AccountSource is required unless accounts are given")
	}
	now := d.Now
	if now == nil {
		now = time.Now
	}
	return &Poller{cfg: cfg, d: d, log: d.Log.With("component", "poller"), now: now, rates: map[string]listRates{}}, nil
}

type account struct {
	id        string
	connected bool // false: the platform, listed without Stripe-Account
}

func (p *Poller) accounts(ctx context.Context) ([]account, error) {
	ids := p.cfg.Accounts
	if len(ids) == 0 {
		known, err := p.d.Accounts.Accounts(ctx)
		if err != nil {
			return nil, fmt.Errorf("list accounts: %w", err)
		}
		ids = append([]string{p.cfg.PlatformAccount}, known...)
	}
	seen := map[string]bool{}
	var out []account
	for _, id := range ids {
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, account{id: id, connected: id != p.cfg.PlatformAccount})
	}
	// The platform first, then connected accounts in a stable order.
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].connected != out[j].connected {
			return !out[i].connected
		}
		return out[i].id < out[j].id
	})
	return out, nil
}

// Run reconciles every account once. A zero Window is a checkpointed run;
// a backfill window lists exactly that window and leaves checkpoints alone.
// The error is non-nil when an account could not be listed or an event
// could not be replayed; the report is complete either way.
func (p *Poller) Run(ctx context.Context, w Window) (Report, error) {
	start := p.now()
	rep := Report{DryRun: p.cfg.DryRun, Backfill: w.IsBackfill()}
	checkpointed := !w.IsBackfill() && !p.cfg.DryRun
	if checkpointed && p.d.Locker != nil {
		release, ok, err := p.d.Locker.TryLock(ctx)
		if err != nil {
			return rep, err
		}
		if !ok {
			return rep, ErrBusy
		}
		defer release()
	}
	accounts, err := p.accounts(ctx)
	if err != nil {
		return rep, err
	}
	if !p.cfg.DryRun && p.d.Observer != nil {
		ids := make([]string, len(accounts))
		for i, a := range accounts {
			ids[i] = a.id
		}
		p.d.Observer.Accounts(ids)
	}
	for _, a := range accounts {
		if ctx.Err() != nil {
			break
		}
		rep.Accounts = append(rep.Accounts, p.reconcile(ctx, a, w, checkpointed))
	}
	rep.Elapsed = p.now().Sub(start)
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("poll: %w", err)
	}
	return rep, rep.Err()
}

// reconcile lists, diffs and replays one account's window, slice by slice,
// and advances its checkpoint over the fully handled prefix.
func (p *Poller) reconcile(ctx context.Context, a account, w Window, checkpointed bool) AccountReport {
	ar := AccountReport{Account: a.id, Platform: !a.connected, DryRun: p.cfg.DryRun}
	log := p.log.With("stripe_account", a.id)
	now := p.now()
	var (
		s             span
		clamped       bool
		old           time.Time
		hasCheckpoint bool
	)
	if w.IsBackfill() {
		s, clamped = p.cfg.backfillSpan(now, w)
	} else {
		var err error
		if old, hasCheckpoint, err = p.d.Checkpoints.Load(ctx, a.id); err != nil {
			ar.Err = err
			log.Error("poll account failed", "error", err)
			return ar
		}
		s, clamped = p.cfg.accountSpan(now, old, hasCheckpoint)
	}
	ar.From, ar.Until, ar.Checkpoint = s.from, s.until, old
	ar.Listing = ListFull
	if checkpointed {
		ar.Listing = p.listingFor(a.id, s, now, old, hasCheckpoint)
	}
	if clamped {
		log.Warn("window starts before Stripe's event retention: older events can no longer be listed; "+
			"check the events table for the gap (poll --stuck) if the checkpoint is this old",
			"checkpoint", old, "horizon", s.from, "retention", p.cfg.Retention)
	}

	// Everything created before `reached` has been handled.
	reached, held := s.from, false
	save := func() {
		// Only a full listing saw every event before `reached`.
		if !checkpointed || ar.Listing != ListFull || hasCheckpoint && !reached.After(old) {
			// Never move back: whatever held this run back (a failed replay
			// at T >= old - overlap) lies inside the next window anyway.
			return
		}
		at := reached
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := p.d.Checkpoints.Save(ctx, a.id, at); err != nil {
			ar.Err = errors.Join(ar.Err, err)
			log.Error("save checkpoint failed", "error", err)
			return
		}
		old, hasCheckpoint, ar.Checkpoint = at, true, at
	}

	for _, sl := range s.slices(p.cfg.Slice) {
		todo, err := p.listAndDiff(ctx, a, sl, ar.Listing, &ar)
		if err != nil {
			ar.Err = errors.Join(ar.Err, err)
			log.Error("listing events failed", "error", err, "from", sl.from, "until", sl.until)
			held = true
			break
		}
		if p.cfg.DryRun {
			ar.WouldReplay = append(ar.WouldReplay, todo...)
			continue
		}
		handled := p.replayAll(ctx, todo, &ar.Counts)
		switch {
		case held:
		case handled < len(todo):
			reached, held = todo[handled].Created, true
		default:
			reached = sl.until
		}
		save()
		if ctx.Err() != nil {
			ar.Err = errors.Join(ar.Err, ctx.Err())
			break
		}
	}
	save()
	if !held && ar.Err == nil {
		p.learn(a.id, ar.Listing, ar.Listed, s)
	}
	if !p.cfg.DryRun {
		if p.d.Observer != nil {
			p.d.Observer.Listed(a.id, ar.Listed)
			p.d.Observer.Replayed(a.id, ar.Replayed)
			p.d.Observer.Failed(a.id, ar.Failed)
			p.d.Observer.WebhookGap(a.id, ar.Missing)
			if hasCheckpoint {
				p.d.Observer.CheckpointAge(a.id, p.now().Sub(old))
			}
			if checkpointed && ar.Listing == ListFull && !held && ar.Err == nil {
				p.d.Observer.Silent(a.id, ar.Missing > 0 && ar.Delivered == 0)
			}
		}
	}
	log.Info("account reconciled", "listing", string(ar.Listing), "from", ar.From, "until", ar.Until, "listed", ar.Listed,
		"already_processed", ar.AlreadyProcessed, "missing", ar.Missing, "unprocessed", ar.Unprocessed,
		"replayed", ar.Replayed, "failed", ar.Failed, "checkpoint", ar.Checkpoint, "dry_run", p.cfg.DryRun)
	return ar
}

// listAndDiff lists one slice newest first (starting_after paging) and
// diffs each page against the events table with one BatchGetItem, keeping
// only the events to replay. They are returned oldest first.
//
// Why not ending_before paging from the oldest event? ending_before needs an
// anchor: an event id at the old end of the window. The oldest event of the
// window is unknown until the whole window was listed, and the last event
// of the previous run is a wrong anchor, because late-listable events older
// than it would never show up after it. starting_after from the newest end
// needs no anchor and is stable while new events arrive (they are newer than
// the window's end, which lies settle seconds in the past). Oldest-first is
// restored by replaying the slice sorted by `created`, and the checkpoint
// only ever moves over a prefix that was fully handled. Slices bound how
// much is listed before the first replay and how far a crash sets a
// backfill back.
func (p *Poller) listAndDiff(ctx context.Context, a account, sl span, listing Listing, ar *AccountReport) ([]Candidate, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := p.listPages(ctx, a, sl, listing)
	var todo []Candidate
	for pg := range pages {
		if pg.err != nil {
			return nil, pg.err
		}
		ids := make([]string, len(pg.Events))
		for i, ev := range pg.Events {
			ids[i] = ev.ID
		}
		recs, err := p.d.Store.BatchGet(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("diff against the events table: %w", err)
		}
		for _, ev := range pg.Events {
			ar.Listed++
			rec, ok := recs[ev.ID]
			switch {
			case !ok:
				ar.Missing++
				todo = append(todo, candidate(a, ev, ReasonMissing))
			case rec.Status == events.StatusProcessed:
				ar.AlreadyProcessed++
			default:
				ar.Unprocessed++
				todo = append(todo, candidate(a, ev, Reason(rec.Status)))
			}
			if ok && (rec.Source == stripeevent.SourceWebhook || rec.Source == stripeevent.SourceEventBridge) {
				ar.Delivered++
			}
		}
		p.progress(a.id, &ar.Counts, len(todo))
	}
	if err := ctx.Err(); err != nil {
		// The listing stopped early: it must not look complete.
		return nil, fmt.Errorf("list events of %s: %w", a.id, err)
	}
	// Listed newest first; reversing gives oldest first, also within one
	// second. The stable sort only guards against an API that mixes pages.
	slices.Reverse(todo)
	sort.SliceStable(todo, func(i, j int) bool { return todo[i].Created.Before(todo[j].Created) })
	return todo, nil
}

type listedPage struct {
	Page
	err error
}

// listPages lists a slice page by page in a goroutine, one page ahead of
// the diff, so that the Stripe API and DynamoDB round trips overlap. The
// channel closes after the last page or after an error; cancelling ctx
// stops the listing.
func (p *Poller) listPages(ctx context.Context, a account, sl span, listing Listing) <-chan listedPage {
	out := make(chan listedPage, 1)
	gte, lte := sl.createdFilter()
	list := p.d.API.ListPage
	if listing == ListUndelivered {
		list = p.d.API.ListUndeliveredPage
	}
	go func() {
		defer close(out)
		after := ""
		for {
			page, err := list(ctx, a.id, a.connected, gte, lte, after, p.cfg.PageSize)
			if err == nil && len(page.Events) == 0 {
				return
			}
			select {
			case out <- listedPage{Page: page, err: err}:
			case <-ctx.Done():
				return
			}
			if err != nil || !page.HasMore {
				return
			}
			after = page.Events[len(page.Events)-1].ID
		}
	}()
	return out
}

// listingFor picks the listing of a checkpointed run of account over s:
//
//   - full when the account has no checkpoint, its checkpoint (which only a
//     full listing moves) is FullEvery old, FullEvery is negative, or this
//     process has not listed it in full yet: a full listing also catches
//     what delivery_success cannot (an event Stripe never tried to deliver:
//     no endpoint for its type, EventBridge only, a record lost after a
//     2xx), and it is what the estimates start from;
//   - otherwise the one expected to take fewer calls: each listing's pages
//     are estimated from the events per second its last run found (an
//     unknown undelivered rate counts as one page). Both cost at least one
//     call, so the undelivered listing wins only when the window holds more
//     than a page of events: a busy account, or a window that grew since
//     the last full listing. Ties go to the full listing.
func (p *Poller) listingFor(account string, s span, now, checkpoint time.Time, hasCheckpoint bool) Listing {
	if p.cfg.FullEvery < 0 || !hasCheckpoint || now.Sub(checkpoint) >= p.cfg.FullEvery {
		return ListFull
	}
	p.mu.Lock()
	r := p.rates[account]
	p.mu.Unlock()
	if !r.knowFull {
		return ListFull
	}
	secs := s.until.Sub(s.from).Seconds()
	if expectedPages(r.undelivered*secs, p.cfg.PageSize) < expectedPages(r.full*secs, p.cfg.PageSize) {
		return ListUndelivered
	}
	return ListFull
}

// expectedPages is the calls a listing of n events takes (at least one).
func expectedPages(n float64, pageSize int64) int {
	return max(1, int(math.Ceil(n/float64(pageSize))))
}

// learn keeps what a complete listing of s found for the next choice.
func (p *Poller) learn(account string, listing Listing, listed int, s span) {
	secs := s.until.Sub(s.from).Seconds()
	if secs <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.rates[account]
	rate := float64(listed) / secs
	if listing == ListUndelivered {
		r.undelivered, r.knowUndelivered = rate, true
	} else {
		r.full, r.knowFull = rate, true
	}
	p.rates[account] = r
}
