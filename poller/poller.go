// Package poller finds the events the service missed or never finished and
// replays them through the one event handler (DESIGN §7).
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
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Defaults of Config.
const (
	DefaultOverlap     = 10 * time.Minute
	DefaultSettle      = 30 * time.Second
	DefaultLookback    = 72 * time.Hour
	DefaultRetention   = 30 * 24 * time.Hour // Stripe lists events of the last 30 days
	DefaultSlice       = 24 * time.Hour
	DefaultPageSize    = 100 // Stripe's maximum
	DefaultConcurrency = 4
)

// Config of a poller.
type Config struct {
	// PlatformAccount is STRIPE_PLATFORM_ACCOUNT: listed without a
	// Stripe-Account header.
	PlatformAccount string
	// Accounts, when set, limits a run to these accounts (--account);
	// otherwise the platform and every account of the AccountSource.
	Accounts []string
	// Overlap is how far before the checkpoint a window starts.
	Overlap time.Duration
	// Settle is how far before now a window ends.
	Settle time.Duration
	// Lookback is the window of an account's first run (no checkpoint), and
	// of a stuck sweep without --since.
	Lookback time.Duration
	// Retention is how far back Stripe lists events; windows never start
	// earlier.
	Retention time.Duration
	// Slice cuts long windows into pieces that are listed, diffed and
	// replayed one after the other, oldest first.
	Slice time.Duration
	// PageSize is the listing's `limit` (1..100).
	PageSize int64
	// Concurrency is how many replays are in flight at once.
	Concurrency int
	// ReplayAttempts is how often a replay is tried before it counts as
	// failed (default 3); ReplayTimeout bounds each attempt (default 30 s).
	ReplayAttempts int
	ReplayTimeout  time.Duration
	// RetryBackoff is the first wait between replay attempts (default 200 ms).
	RetryBackoff time.Duration
	// DryRun lists what would be replayed and changes nothing: no replay, no
	// checkpoint, no metrics.
	DryRun bool
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Overlap, DefaultOverlap)
	def(&c.Settle, DefaultSettle)
	def(&c.Lookback, DefaultLookback)
	def(&c.Retention, DefaultRetention)
	def(&c.Slice, DefaultSlice)
	def(&c.ReplayTimeout, 30*time.Second)
	def(&c.RetryBackoff, 200*time.Millisecond)
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.ReplayAttempts == 0 {
		c.ReplayAttempts = 3
	}
	return c
}

// Validate reports every invalid setting at once.
func (c Config) Validate() error {
	var errs []error
	if c.PlatformAccount == "" {
		errs = append(errs, errors.New("platform account: required"))
	}
	for name, d := range map[string]time.Duration{"overlap": c.Overlap, "settle": c.Settle} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative", name))
		}
	}
	for name, d := range map[string]time.Duration{"lookback": c.Lookback, "retention": c.Retention, "slice": c.Slice} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive", name))
		}
	}
	if c.Slice > 0 && c.Slice < time.Second {
		errs = append(errs, errors.New("slice: at least 1s"))
	}
	if c.PageSize < 1 || c.PageSize > 100 {
		errs = append(errs, errors.New("page size: 1 to 100"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("concurrency: at least 1"))
	}
	return errors.Join(errs...)
}

// EventStore is the part of the events store the poller reads.
type EventStore interface {
	// BatchGet returns the records of ids (without payloads); absent and
	// expired ones are missing from the map.
	BatchGet(ctx context.Context, ids []string) (map[string]events.Record, error)
	// Get returns one record with its payload.
	Get(ctx context.Context, id string) (events.Record, error)
	// ByDate lists the records created on a UTC date (date/time index).
	ByDate(ctx context.Context, date string, r events.Range, limit int32, cursor string) (events.Page, error)
}

// Checkpoints persists each account's checkpoint: every event created before
// it was listed and found processed or replayed.
type Checkpoints interface {
	Load(ctx context.Context, account string) (at time.Time, ok bool, err error)
	Save(ctx context.Context, account string, at time.Time) error
}

// Locker keeps two checkpointed runs from racing (optional).
type Locker interface {
	TryLock(ctx context.Context) (release func(), ok bool, err error)
}

// AccountSource lists the connected accounts the service knows. Today the
// processed-events ledger (tracking.LedgerAccounts); tracked purchases'
// accounts can be added by combining sources (see Accounts).
type AccountSource interface {
	Accounts(ctx context.Context) ([]string, error)
}

// Accounts combines account sources; duplicates are fine.
type Accounts []AccountSource

// Accounts implements AccountSource.
func (s Accounts) Accounts(ctx context.Context) ([]string, error) {
	var all []string
	for _, src := range s {
		ids, err := src.Accounts(ctx)
		if err != nil {
			return nil, err
		}
		all = append(all, ids...)
	}
	return all, nil
}

// Observer receives the metrics of each account's reconciliation.
type Observer interface {
	Listed(account string, n int)
	Replayed(account string, n int)
	Failed(account string, n int)
	// WebhookGap counts events the API listed that the events table never
	// recorded: the webhook never arrived (or was never accepted).
	WebhookGap(account string, n int)
	CheckpointAge(account string, age time.Duration)
}

// Deps are the poller's collaborators.
type Deps struct {
	API         *EventsAPI
	Store       EventStore
	Checkpoints Checkpoints
	Accounts    AccountSource
	Replayer    Replayer
	Locker      Locker           // optional
	Observer    Observer         // optional
	Progress    func(p Progress) // optional; called often, from several goroutines
	Log         *slog.Logger     // required
	Now         func() time.Time // optional; time.Now
}

// Poller reconciles the service's events with the Stripe Events API.
type Poller struct {
	cfg Config
	d   Deps
	log *slog.Logger
	now func() time.Time
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
	return &Poller{cfg: cfg, d: d, log: d.Log.With("component", "poller"), now: now}, nil
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
	if clamped {
		log.Warn("window starts before Stripe's event retention: older events can no longer be listed; "+
			"check the events table for the gap (poll --stuck) if the checkpoint is this old",
			"checkpoint", old, "horizon", s.from, "retention", p.cfg.Retention)
	}

	// Everything created before `reached` has been handled.
	reached, held := s.from, false
	save := func() {
		if !checkpointed || hasCheckpoint && !reached.After(old) {
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
		todo, err := p.listAndDiff(ctx, a, sl, &ar)
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
	if !p.cfg.DryRun {
		if p.d.Observer != nil {
			p.d.Observer.Listed(a.id, ar.Listed)
			p.d.Observer.Replayed(a.id, ar.Replayed)
			p.d.Observer.Failed(a.id, ar.Failed)
			p.d.Observer.WebhookGap(a.id, ar.Missing)
			if hasCheckpoint {
				p.d.Observer.CheckpointAge(a.id, p.now().Sub(old))
			}
		}
	}
	log.Info("account reconciled", "from", ar.From, "until", ar.Until, "listed", ar.Listed,
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
func (p *Poller) listAndDiff(ctx context.Context, a account, sl span, ar *AccountReport) ([]Candidate, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := p.listPages(ctx, a, sl)
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
func (p *Poller) listPages(ctx context.Context, a account, sl span) <-chan listedPage {
	out := make(chan listedPage, 1)
	gte, lte := sl.createdFilter()
	go func() {
		defer close(out)
		after := ""
		for {
			page, err := p.d.API.ListPage(ctx, a.id, a.connected, gte, lte, after, p.cfg.PageSize)
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

// Reason says why an event is replayed.
type Reason string

// Reasons.
const (
	ReasonMissing   Reason = "missing"    // not in the events table (a webhook gap)
	ReasonReceived  Reason = "received"   // recorded, never processed
	ReasonFailed    Reason = "failed"     // recorded, processing failed
	ReasonNoPayload Reason = "no_payload" // stuck, but the record has no payload
)

// Candidate is an event to replay.
type Candidate struct {
	ID      string
	Type    string
	Account string
	Created time.Time
	Reason  Reason
	Payload []byte `json:"-"`
}

func candidate(a account, ev Listed, reason Reason) Candidate {
	payload := ev.Raw
	if a.connected && ev.Account == "" {
		// The payload is what gets recorded: make sure the record gets the
		// connected account, not the platform's.
		payload = withAccount(payload, a.id)
	}
	return Candidate{ID: ev.ID, Type: ev.Type, Account: a.id, Created: time.Unix(ev.Created, 0).UTC(), Reason: reason, Payload: payload}
}

// replayAll replays todo (oldest first) with bounded concurrency and returns
// the length of the fully handled prefix: the index of the first event that
// failed or was not attempted because ctx ended.
func (p *Poller) replayAll(ctx context.Context, todo []Candidate, c *Counts) int {
	if len(todo) == 0 {
		return 0
	}
	handled := make([]bool, len(todo))
	jobs := make(chan int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range min(p.cfg.Concurrency, len(todo)) {
		wg.Go(func() {
			for i := range jobs {
				handled[i] = p.replayOne(ctx, todo[i], c, &mu, len(todo))
			}
		})
	}
dispatch:
	for i := range todo {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(jobs)
	wg.Wait()
	for i, ok := range handled {
		if !ok {
			return i
		}
	}
	return len(todo)
}

// replayOne replays one event, retrying transient failures. In-flight
// replays finish even when ctx ends (shutdown waits for them); only the
// retries stop.
func (p *Poller) replayOne(ctx context.Context, c Candidate, counts *Counts, mu *sync.Mutex, total int) bool {
	log := p.log.With("event_id", c.ID, "event_type", c.Type, "stripe_account", c.Account, "reason", string(c.Reason))
	var (
		outcome stripeevent.Outcome
		err     error
	)
	for attempt := 0; attempt < p.cfg.ReplayAttempts; attempt++ {
		if attempt > 0 {
			if sleep(ctx, p.cfg.RetryBackoff<<(attempt-1)) != nil {
				break
			}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.ReplayTimeout)
		outcome, err = p.d.Replayer.Replay(rctx, c.ID, c.Payload)
		cancel()
		if err == nil || errors.Is(err, ErrPermanent) {
			break
		}
		log.Warn("replay attempt failed", "attempt", attempt+1, "error", err)
	}
	mu.Lock()
	defer func() {
		p.progress(c.Account, counts, total)
		mu.Unlock()
	}()
	switch {
	case err != nil:
		counts.Failed++
		log.Error("replay failed; the checkpoint holds before this event", "error", err, "created", c.Created)
		return false
	case outcome == stripeevent.Duplicate:
		// Processed meanwhile (a concurrent webhook delivery).
		counts.AlreadyProcessed++
		return true
	case outcome == stripeevent.Ignored:
		counts.Ignored++
		log.Warn("replayed event was ignored (livemode differs from the API key's mode)")
		return true
	default:
		counts.Replayed++
		log.Info("event replayed", "outcome", string(outcome), "created", c.Created)
		return true
	}
}

func (p *Poller) progress(account string, c *Counts, pending int) {
	if p.d.Progress == nil {
		return
	}
	p.d.Progress(Progress{Account: account, Counts: *c, ToReplay: pending})
}
