// Package incidents groups what is broken into incidents (docs/design.md §4): failed
// and rejected events, thin events not yet hydrated, outbox dead letters,
// unresolved charges and failed billing runs, by kind, normalised cause,
// event type and stripe_account, each with a state an operator moves from
// open to acknowledged to resolved.
package incidents

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/failcause"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/thin"
)

// Kind says where an incident's occurrences come from.
type Kind string

const (
	KindEvent    Kind = "event"    // failed or rejected events, thin events not hydrated
	KindDelivery Kind = "delivery" // outbox dead letters
	KindBilling  Kind = "billing"  // unresolved charges, failed billing runs
)

// CauseChargeOutcomeUnknown is the cause of a billing incident of charges
// whose outcome is unknown (unresolved: the next collection asks Stripe
// first).
const CauseChargeOutcomeUnknown = "charge_outcome_unknown"

// CauseRunEntriesFailed and CauseRunAccountsLocked are the causes of a
// billing job's runs that ended without an error yet left entries failed,
// or accounts untouched because another holder kept their lock.
const (
	CauseRunEntriesFailed  = "run_entries_failed"
	CauseRunAccountsLocked = "run_accounts_locked"
)

// CauseQueueDeadLetter: a billing queue message of the account failed on
// every receive and went to the queue's dead-letter queue; a later
// collection of the account settles it.
const CauseQueueDeadLetter = "queue_dead_letter"

// State is an incident's state.
type State string

const (
	Open         State = "open"
	Acknowledged State = "acknowledged"
	Resolved     State = "resolved"
)

// ParseState accepts the three states.
func ParseState(s string) (State, bool) {
	switch st := State(s); st {
	case Open, Acknowledged, Resolved:
		return st, true
	}
	return "", false
}

// SystemActor records a reopen: the cause came back.
const SystemActor = "system"

// MaxSamples is how many occurrence ids an incident shows, newest first.
const MaxSamples = 5

// Incident is one group of failures and its state.
type Incident struct {
	ID            string
	Kind          Kind
	Cause         string
	EventType     string
	StripeAccount string // "" for a delivery or billing incident
	Count         int64  // 0: nothing currently failing (kept for its state)
	FirstSeen     time.Time
	LastSeen      time.Time
	State         State
	StateAt       time.Time // zero while never changed
	StateBy       string
	SampleIDs     []string
}

// Config tunes a Store.
type Config struct {
	// PlatformAccount is STRIPE_PLATFORM_ACCOUNT: a thin event without a
	// context is the platform's.
	PlatformAccount string
	// PendingAfter is how long a thin event may wait for its first
	// hydration before it counts as an incident (0: 5 minutes).
	PendingAfter time.Duration
	// Keep is how long a stored state outlives its last occurrence in the
	// listing (0: 30 days).
	Keep time.Duration
	Now  func() time.Time // nil: time.Now
}

// Store derives incidents from Postgres and keeps their states there.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config

	// The failing rows are read through their tables' owners.
	problems   *opsdata.Problems
	runs       *opsdata.Runs
	queueRuns  *opsdata.QueueRuns
	hydrations *thin.Queue
	dead       *outbox.Store

	// classes caches Classify by message: the failures stay listed between
	// reads, and classifying 10,000 distinct messages costs ~200 ms of CPU
	// a read (BenchmarkList).
	classMu sync.Mutex
	classes map[string]string
}

// maxCachedClasses bounds the cache; past it, it starts afresh.
const maxCachedClasses = 100_000

// classify is Classify, cached.
func (s *Store) classify(msg string) string {
	s.classMu.Lock()
	c, ok := s.classes[msg]
	s.classMu.Unlock()
	if ok {
		return c
	}
	c = failcause.Classify(msg)
	s.classMu.Lock()
	if s.classes == nil || len(s.classes) >= maxCachedClasses {
		s.classes = map[string]string{}
	}
	s.classes[msg] = c
	s.classMu.Unlock()
	return c
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool, cfg Config) *Store {
	if cfg.PendingAfter <= 0 {
		cfg.PendingAfter = 5 * time.Minute
	}
	if cfg.Keep <= 0 {
		cfg.Keep = 30 * 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Store{pool: pool, cfg: cfg,
		problems: opsdata.NewProblems(pool, slog.Default()), runs: opsdata.NewRuns(pool, nil), queueRuns: opsdata.NewQueueRuns(pool),
		hydrations: thin.NewQueue(pool), dead: outbox.NewStore(pool, slog.Default(), cfg.Now)}
}

// ID is the stable id of a group.
func ID(kind Kind, cause, eventType, account string) string {
	h := sha256.Sum256([]byte(string(kind) + "\x00" + cause + "\x00" + eventType + "\x00" + account))
	return "inc_" + hex.EncodeToString(h[:10])
}

// List returns the incidents in state (all when empty), most recent
// occurrence first. A resolved incident whose cause came back is reopened
// (and audited) on the way.
func (s *Store) List(ctx context.Context, state State) ([]Incident, error) {
	all, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Incident, 0, len(all))
	for _, inc := range all {
		if state == "" || inc.State == state {
			out = append(out, inc)
		}
	}
	return out, nil
}

// Get returns one incident.
func (s *Store) Get(ctx context.Context, id string) (Incident, error) {
	all, err := s.current(ctx)
	if err != nil {
		return Incident{}, err
	}
	for _, inc := range all {
		if inc.ID == id {
			return inc, nil
		}
	}
	return Incident{}, apperr.New(apperr.CodeNotFound, "incident %s not found", id)
}

// SetState moves incident id to acknowledged or resolved on behalf of actor
// and writes an audit row. Setting the state it is in changes nothing.
func (s *Store) SetState(ctx context.Context, id string, to State, actor string) (Incident, error) {
	if to != Acknowledged && to != Resolved {
		return Incident{}, apperr.Invalid("state must be acknowledged or resolved")
	}
	inc, err := s.Get(ctx, id)
	if err != nil {
		return Incident{}, err
	}
	if inc.State == to {
		return inc, nil
	}
	if inc.State == Resolved && to == Acknowledged {
		// The one conflict of SetState.
		return inc, apperr.New(apperr.CodeConflict, "incident %s is resolved: it cannot be acknowledged; it reopens by itself when its cause comes back", id)
	}
	now := s.cfg.Now().UTC()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The row is locked and its state checked again: two operators
		// racing write one transition each from the state they saw.
		var from State = Open
		err := tx.QueryRow(ctx, `SELECT state FROM incidents WHERE id = $1 FOR UPDATE`, id).Scan(&from)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			tag, err := tx.Exec(ctx, `INSERT INTO incidents (id, kind, cause, event_type, stripe_account, state, state_at, state_by)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING`,
				id, inc.Kind, inc.Cause, inc.EventType, inc.StripeAccount, to, now, actor)
			if err != nil {
				return fmt.Errorf("insert incident state: %w", err)
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("incident %s: state changed concurrently", id)
			}
		case err != nil:
			return fmt.Errorf("read incident state: %w", err)
		default:
			if from != inc.State {
				return fmt.Errorf("incident %s: state changed concurrently", id)
			}
			if _, err := tx.Exec(ctx, `UPDATE incidents SET state = $2, state_at = $3, state_by = $4 WHERE id = $1`,
				id, to, now, actor); err != nil {
				return fmt.Errorf("update incident state: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO incident_audit (incident_id, from_state, to_state, actor, at) VALUES ($1, $2, $3, $4, $5)`,
			id, inc.State, to, actor, now); err != nil {
			return fmt.Errorf("audit incident state: %w", err)
		}
		return nil
	})
	if err != nil {
		return Incident{}, err
	}
	inc.State, inc.StateAt, inc.StateBy = to, now, actor
	return inc, nil
}

// AuditEntry is one state change.
type AuditEntry struct {
	From, To State
	Actor    string
	At       time.Time
}

// Audit returns the state changes of incident id, oldest first.
func (s *Store) Audit(ctx context.Context, id string) ([]AuditEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT from_state, to_state, actor, at FROM incident_audit WHERE incident_id = $1 ORDER BY at, id`, id)
	if err != nil {
		return nil, fmt.Errorf("read incident audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := r.Scan(&e.From, &e.To, &e.Actor, &e.At)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read incident audit: %w", err)
	}
	return out, nil
}

// current derives every incident, merges the stored states and reopens the
// resolved incidents whose cause came back.
func (s *Store) current(ctx context.Context) ([]Incident, error) {
	groups, err := s.derive(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, kind, cause, event_type, stripe_account, state, state_at, state_by FROM incidents`)
	if err != nil {
		return nil, fmt.Errorf("read incident states: %w", err)
	}
	stored, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Incident, error) {
		var i Incident
		err := r.Scan(&i.ID, &i.Kind, &i.Cause, &i.EventType, &i.StripeAccount, &i.State, &i.StateAt, &i.StateBy)
		return i, err
	})
	if err != nil {
		return nil, fmt.Errorf("read incident states: %w", err)
	}
	now := s.cfg.Now().UTC()
	for _, st := range stored {
		g, ok := groups[st.ID]
		if !ok {
			if now.Sub(st.StateAt) > s.cfg.Keep {
				continue
			}
			st.SampleIDs = []string{}
			groups[st.ID] = &st
			continue
		}
		g.State, g.StateAt, g.StateBy = st.State, st.StateAt, st.StateBy
		if g.State == Resolved && g.LastSeen.After(g.StateAt) {
			if err := s.reopen(ctx, g, now); err != nil {
				return nil, err
			}
		}
	}
	out := make([]Incident, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LastSeen.Equal(out[j].LastSeen) {
			return out[i].LastSeen.After(out[j].LastSeen)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// reopen moves a resolved incident back to open, once however many
// readers see the recurrence at the same time.
func (s *Store) reopen(ctx context.Context, g *Incident, now time.Time) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE incidents SET state = 'open', state_at = $2, state_by = $3
			WHERE id = $1 AND state = 'resolved' AND state_at = $4`, g.ID, now, SystemActor, g.StateAt)
		if err != nil {
			return fmt.Errorf("reopen incident %s: %w", g.ID, err)
		}
		if tag.RowsAffected() == 1 {
			if _, err := tx.Exec(ctx, `INSERT INTO incident_audit (incident_id, from_state, to_state, actor, at) VALUES ($1, 'resolved', 'open', $2, $3)`,
				g.ID, SystemActor, now); err != nil {
				return fmt.Errorf("audit reopen of %s: %w", g.ID, err)
			}
		}
		g.State, g.StateAt, g.StateBy = Open, now, SystemActor
		return nil
	})
}

// part is one row of a source's GROUP BY: failures sharing a raw message.
type part struct {
	kind               Kind
	cause              string
	eventType, account string
	count              int64
	first, last        time.Time
	samples            []string
}

// derive groups every source's rows by kind, cause, type and account.
func (s *Store) derive(ctx context.Context) (map[string]*Incident, error) {
	var parts []part
	add := func(groups []failcause.Group, mk func(g failcause.Group) part) {
		for _, g := range groups {
			p := mk(g)
			p.count, p.first, p.last, p.samples = g.Count, g.First, g.Last, g.Samples
			parts = append(parts, p)
		}
	}
	// Failed and rejected events: their groups are kept as the rows are
	// written; rows with no cause of this classifier get one first.
	if err := s.classifyPending(ctx); err != nil {
		return nil, err
	}
	gs, err := s.problems.Groups(ctx, MaxSamples)
	if err != nil {
		return nil, err
	}
	add(gs, func(g failcause.Group) part {
		return part{kind: KindEvent, cause: g.Message, eventType: g.Type, account: g.Account}
	})
	gs, err = s.hydrations.FailingGroups(ctx, s.cfg.Now().Add(-s.cfg.PendingAfter), MaxSamples)
	if err != nil {
		return nil, err
	}
	add(gs, func(g failcause.Group) part {
		account := g.Account
		if account == "" {
			account = s.cfg.PlatformAccount
		}
		cause := "hydration.pending"
		if g.Message != "" {
			cause = "hydration." + s.classify(g.Message)
		}
		return part{kind: KindEvent, cause: cause, eventType: g.Type, account: account}
	})
	gs, err = s.dead.DeadGroups(ctx, MaxSamples)
	if err != nil {
		return nil, err
	}
	add(gs, func(g failcause.Group) part {
		return part{kind: KindDelivery, cause: s.classify(g.Message), eventType: g.Type}
	})
	gs, err = s.runs.FailedGroups(ctx, MaxSamples)
	if err != nil {
		return nil, err
	}
	add(gs, func(g failcause.Group) part {
		return part{kind: KindBilling, cause: s.classify(g.Message), eventType: g.Type}
	})
	// Runs that ended without an error yet left work behind (runReportSources).
	for _, src := range runReportSources {
		gs, err = s.runs.LeftGroups(ctx, src.fields, src.named, MaxSamples)
		if err != nil {
			return nil, err
		}
		add(gs, func(g failcause.Group) part {
			return part{kind: KindBilling, cause: src.cause, eventType: g.Type}
		})
	}
	// Billing queue messages that went to the dead-letter queue, per account.
	gs, err = s.queueRuns.DeadGroups(ctx, MaxSamples)
	if err != nil {
		return nil, err
	}
	add(gs, func(g failcause.Group) part {
		return part{kind: KindBilling, cause: CauseQueueDeadLetter, eventType: g.Type, account: g.Account}
	})
	// Newest parts first, so the samples merged below are the newest.
	sort.Slice(parts, func(i, j int) bool { return parts[i].last.After(parts[j].last) })
	groups := map[string]*Incident{}
	for _, p := range parts {
		id := ID(p.kind, p.cause, p.eventType, p.account)
		g, ok := groups[id]
		if !ok {
			g = &Incident{ID: id, Kind: p.kind, Cause: p.cause, EventType: p.eventType, StripeAccount: p.account,
				FirstSeen: p.first, LastSeen: p.last, State: Open, SampleIDs: []string{}}
			groups[id] = g
		}
		g.Count += p.count
		if p.first.Before(g.FirstSeen) {
			g.FirstSeen = p.first
		}
		if p.last.After(g.LastSeen) {
			g.LastSeen = p.last
		}
		for _, sid := range p.samples {
			if len(g.SampleIDs) < MaxSamples {
				g.SampleIDs = append(g.SampleIDs, sid)
			}
		}
	}
	return groups, nil
}

// runReportSources are the billing incidents read from the counters of the
// runs' reports (a run that ended without an error, yet left work behind):
//   - unresolved charges: attempts whose outcome is unknown (in flight with
//     no trustworthy answer from Stripe). The billing core keeps them on the
//     period in DynamoDB and every run that meets one counts it (unknown:
//     new this run; unresolved: left so), until a run settles it by asking
//     Stripe;
//   - entries that failed (errors: see the run's log lines);
//   - accounts whose lock another holder kept for the whole run (locked).
var runReportSources = []struct {
	cause  string
	fields []string
	// named is the report's list naming what was left
	// ("<account>/<subscription_id>"): the newest run's are the samples
	// ("" or an empty list: the runs' ids are).
	named string
}{
	{CauseChargeOutcomeUnknown, []string{"unknown", "unresolved"}, "unresolved_samples"},
	{CauseRunEntriesFailed, []string{"errors"}, ""},
	{CauseRunAccountsLocked, []string{"locked"}, ""},
}

// classifyBatch is how many unclassified problem rows one statement
// classifies.
const classifyBatch = 5000

// maxClassifyBatches bounds what one read classifies, so a read after an
// upgrade under a huge list still answers.
const maxClassifyBatches = 40

// classifyPending computes the cause of the problem rows that have none
// from this classifier: rows listed before causes were kept, by an older
// classifier, or by hand. It runs until none is left (after an upgrade, the
// first read pays for the list once, up to maxClassifyBatches batches; a
// longer list is finished by the reads after it). A row rewritten
// meanwhile (another error) keeps what its writer computed.
func (s *Store) classifyPending(ctx context.Context) error {
	cause := func(outcome, msg string) string { return failcause.ForOutcome(outcome, s.classify(msg)) }
	for range maxClassifyBatches {
		n, err := s.problems.ClassifyPending(ctx, failcause.Version, cause, classifyBatch)
		if err != nil {
			return err
		}
		if n < classifyBatch {
			return nil
		}
	}
	return nil
}

// Counts groups the incidents by kind and state: how many, and how many
// occurrences they hold (the metrics' view).
func (s *Store) Counts(ctx context.Context) ([]metrics.IncidentCount, error) {
	list, err := s.List(ctx, "")
	if err != nil {
		return nil, err
	}
	by := map[[2]string]*metrics.IncidentCount{}
	var out []metrics.IncidentCount
	for _, inc := range list {
		k := [2]string{string(inc.Kind), string(inc.State)}
		if by[k] == nil {
			by[k] = &metrics.IncidentCount{Kind: k[0], State: k[1]}
		}
		by[k].Incidents++
		by[k].Occurrences += inc.Count
	}
	for _, c := range by {
		out = append(out, *c)
	}
	return out, nil
}
