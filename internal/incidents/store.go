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
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
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
	c = Classify(msg)
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
	return &Store{pool: pool, cfg: cfg}
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
	read := func(name, query string, args []any, mk func(class, typ, account string) part) error {
		rows, err := s.pool.Query(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				msg, typ, account string
				p                 part
			)
			if err := rows.Scan(&typ, &account, &msg, &p.count, &p.first, &p.last, &p.samples); err != nil {
				return fmt.Errorf("read %s: %w", name, err)
			}
			q := mk(msg, typ, account)
			q.count, q.first, q.last, q.samples = p.count, p.first, p.last, p.samples
			parts = append(parts, q)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		return nil
	}
	samples := strconv.Itoa(MaxSamples)
	// Failed and rejected events: their groups are kept as the rows are
	// written (incident_event_groups); each group's first and last
	// occurrence and newest samples are a few entries of the group index.
	if err := s.classifyPending(ctx); err != nil {
		return nil, err
	}
	err := read("event problems", `SELECT g.event_type, g.stripe_account, g.cause, g.n, o.first, o.last, coalesce(x.samples, '{}')
		FROM incident_event_groups g
		CROSS JOIN LATERAL (SELECT
			(SELECT p.at FROM ops_event_problems p WHERE p.cause = g.cause AND p.event_type = g.event_type AND p.stripe_account = g.stripe_account
			 ORDER BY p.at LIMIT 1) AS first,
			(SELECT p.at FROM ops_event_problems p WHERE p.cause = g.cause AND p.event_type = g.event_type AND p.stripe_account = g.stripe_account
			 ORDER BY p.at DESC LIMIT 1) AS last) o
		CROSS JOIN LATERAL (SELECT array_agg(event_id) AS samples FROM (SELECT p.event_id FROM ops_event_problems p
			WHERE p.cause = g.cause AND p.event_type = g.event_type AND p.stripe_account = g.stripe_account
			ORDER BY p.at DESC, p.event_id LIMIT `+samples+`) s) x
		WHERE g.n > 0 AND o.first IS NOT NULL`, nil,
		func(cause, typ, account string) part {
			return part{kind: KindEvent, cause: cause, eventType: typ, account: account}
		})
	if err != nil {
		return nil, err
	}
	pendingBefore := s.cfg.Now().Add(-s.cfg.PendingAfter)
	err = read("thin hydrations", `SELECT event_type, context, coalesce(last_error, ''), count(*), min(received_at), max(received_at),
			(array_agg(event_id ORDER BY received_at DESC, event_id))[1:`+samples+`]
		FROM thin_hydrations WHERE last_error IS NOT NULL OR received_at < $1 GROUP BY 1, 2, 3`, []any{pendingBefore},
		func(msg, typ, account string) part {
			if account == "" {
				account = s.cfg.PlatformAccount
			}
			cause := "hydration.pending"
			if msg != "" {
				cause = "hydration." + s.classify(msg)
			}
			return part{kind: KindEvent, cause: cause, eventType: typ, account: account}
		})
	if err != nil {
		return nil, err
	}
	err = read("outbox dead letters", `SELECT topic || '/' || type, '', coalesce(last_error, ''), count(*), min(dead_at), max(dead_at),
			(array_agg(id::text ORDER BY dead_at DESC, id))[1:`+samples+`]
		FROM outbox WHERE dead_at IS NOT NULL AND delivered_at IS NULL GROUP BY topic, type, 3`, nil,
		func(msg, typ, _ string) part {
			return part{kind: KindDelivery, cause: s.classify(msg), eventType: typ}
		})
	if err != nil {
		return nil, err
	}
	// A job's failed runs that no later successful run of the same date or
	// a later one settled (an older date's run never read theirs).
	err = read("billing runs", `SELECT r.job, '', r.error, count(*), min(r.started_at), max(r.started_at),
			(array_agg(r.id::text ORDER BY r.started_at DESC, r.id))[1:`+samples+`]
		FROM ops_billing_runs r
		WHERE coalesce(r.error, '') <> ''
		  AND NOT EXISTS (SELECT 1 FROM ops_billing_runs ok
		                  WHERE ok.job = r.job AND coalesce(ok.error, '') = '' AND ok.started_at > r.started_at AND ok.date >= r.date)
		GROUP BY r.job, r.error`, nil,
		func(msg, typ, _ string) part {
			return part{kind: KindBilling, cause: s.classify(msg), eventType: typ}
		})
	if err != nil {
		return nil, err
	}
	// Runs that ended without an error yet left work behind (runReportSources).
	for _, src := range runReportSources {
		err = read(src.cause, runReportQuery(src.fields, src.named, samples), nil,
			func(_, typ, _ string) part {
				return part{kind: KindBilling, cause: src.cause, eventType: typ}
			})
		if err != nil {
			return nil, err
		}
	}
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

// runReportQuery groups, per job, the runs that left some of fields and
// that no later run of the job ended without an error, leaving none, for
// the same date or a later one: count is what the newest
// of them left (the greatest of fields); the samples are what the newest
// run's report list named names, else those runs' ids (the console's runs
// page shows their reports). Field and list names are the code's constants,
// never input.
func runReportQuery(fields []string, named, samples string) string {
	left := func(alias string) string {
		parts := make([]string, len(fields))
		for i, f := range fields {
			parts[i] = "coalesce((" + alias + ".report->>'" + f + "')::int, 0)"
		}
		if len(parts) == 1 {
			return parts[0]
		}
		return "greatest(" + strings.Join(parts, ", ") + ")"
	}
	namedSQL := "NULL::text[]"
	if named != "" {
		// The newest run's names, when it has any.
		namedSQL = `(SELECT nullif(array_agg(e), '{}') FROM ops_billing_runs x,
				LATERAL (SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof(x.report->'` + named + `') = 'array'
					THEN x.report->'` + named + `' ELSE '[]' END) AS e LIMIT ` + samples + `) n
			WHERE x.id = g.newest)`
	}
	// The runs that left some and no later clean run of their job covered:
	// a clean run settles a run only if its date is on or after that run's
	// (collect --date D never reads a later date's charges in flight).
	// covered: the latest date of the job's clean runs started after this one.
	return `WITH x AS (SELECT x.id, x.job, x.date, x.started_at, coalesce(x.error, '') = '' AND ` + left("x") + ` = 0 AS clean,
		           ` + left("x") + ` AS left_open
		           FROM ops_billing_runs x),
		r AS (SELECT x.*, max(x.date) FILTER (WHERE x.clean) OVER (PARTITION BY x.job ORDER BY x.started_at DESC, x.id DESC
		                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered
		      FROM x),
		g AS (SELECT r.job, (array_agg(r.left_open ORDER BY r.started_at DESC, r.id DESC))[1] AS left_open,
		             min(r.started_at) AS first, max(r.started_at) AS last,
		             (array_agg(r.id ORDER BY r.started_at DESC, r.id DESC))[1] AS newest,
		             (array_agg(r.id::text ORDER BY r.started_at DESC, r.id DESC))[1:` + samples + `] AS runs
		      FROM r
		      WHERE r.left_open > 0 AND (r.covered IS NULL OR r.covered < r.date)
		      GROUP BY r.job)
		SELECT g.job, '', '', g.left_open::bigint, g.first, g.last, coalesce(` + namedSQL + `, g.runs) FROM g`
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
	for range maxClassifyBatches {
		rows, err := s.pool.Query(ctx, `SELECT event_id, outcome, error FROM ops_event_problems
			WHERE cause_version IS NULL OR cause_version < $1 LIMIT `+strconv.Itoa(classifyBatch), CauseVersion)
		if err != nil {
			return fmt.Errorf("read unclassified problems: %w", err)
		}
		var ids, outcomes, msgs, causes []string
		for rows.Next() {
			var id, outcome, msg string
			if err := rows.Scan(&id, &outcome, &msg); err != nil {
				rows.Close()
				return fmt.Errorf("read unclassified problems: %w", err)
			}
			ids, outcomes, msgs = append(ids, id), append(outcomes, outcome), append(msgs, msg)
			causes = append(causes, eventCause(outcome, msg, s.classify))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read unclassified problems: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		if _, err := s.pool.Exec(ctx, `UPDATE ops_event_problems p SET cause = u.cause, cause_version = $5
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(event_id, outcome, error, cause)
			WHERE p.event_id = u.event_id AND p.outcome = u.outcome AND p.error = u.error
			  AND (p.cause_version IS NULL OR p.cause_version < $5)`, ids, outcomes, msgs, causes, CauseVersion); err != nil {
			return fmt.Errorf("classify problems: %w", err)
		}
		if len(ids) < classifyBatch {
			return nil
		}
	}
	return nil
}

// EventCause is the cause of an event listed as failed or rejected with
// error msg: its class, prefixed "rejected." for a rejection.
func EventCause(outcome, msg string) string { return eventCause(outcome, msg, Classify) }

// eventCause is EventCause with classify (the store's is cached).
func eventCause(outcome, msg string, classify func(string) string) string {
	if outcome == "rejected" {
		return "rejected." + classify(msg)
	}
	return classify(msg)
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
