// Package replay is the bulk replay of docs/design.md §4: the events a filter
// matches (an incident, status, type, account, time range) are re-driven in
// the background through the one replay path, within the Stripe API budget
// at the bulk class, resuming after a restart.
package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/failcause"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
)

// MaxItems bounds one replay (as Svix bounds a recovery): a filter matching
// more is refused, to be narrowed.
const MaxItems = 10000

// MaxRunning bounds the replays running at once: each holds a runner and
// draws on the Stripe API budget's bulk class, so more would only queue
// behind each other while an operator loses track of them. A further one
// is refused (409) until one finishes or is cancelled.
const MaxRunning = 3

// matchPage is how many matched rows are read at a time: matching holds
// one page in memory, never the whole match.
const matchPage = 500

// SampleSize is how many matched events a dry run shows.
const SampleSize = 10

// Status of a replay.
const (
	StatusRunning   = "running"
	StatusDone      = "done"
	StatusCancelled = "cancelled"
)

// filterStatuses are the statuses a filter may select ("" selects any):
// events listed as failed or rejected, outbox dead letters.
var filterStatuses = []string{"failed", "rejected", StatusDead}

// ValidFilterStatus reports whether a filter may select status ("" any).
func ValidFilterStatus(status string) bool {
	return status == "" || slices.Contains(filterStatuses, status)
}

// StatusDead in a filter selects outbox dead letters instead of events
// (Type then is topic/type).
const StatusDead = "dead"

// Filter selects the failed and rejected events, or the dead letters, to
// replay. At least one field must be set.
type Filter struct {
	Incident      string     `json:"incident,omitempty"`
	Status        string     `json:"status,omitempty"` // failed, rejected, or dead (outbox dead letters)
	Type          string     `json:"type,omitempty"`
	StripeAccount string     `json:"stripe_account,omitempty"`
	Since         *time.Time `json:"since,omitempty"`
	Until         *time.Time `json:"until,omitempty"`
}

// Empty says no field is set.
func (f Filter) Empty() bool {
	return f.Incident == "" && f.Status == "" && f.Type == "" && f.StripeAccount == "" && f.Since == nil && f.Until == nil
}

// Item is one matched event, or dead letter (Kind delivery: EventID is the
// outbox message id, EventType its topic/type).
type Item struct {
	Kind          string // event or delivery
	EventID       string
	EventType     string
	StripeAccount string
	Status        string // failed or rejected
	Error         string
	At            time.Time
	// Would is a dry run's forecast: "duplicate" when the handler's ledger
	// already holds the event (its effects were applied), else "apply";
	// "redrive" for a dead letter.
	Would string
}

// Preview is a dry run's answer.
type Preview struct {
	Matched int
	Sample  []Item
}

// Replay is one bulk replay and its progress.
type Replay struct {
	ID                             string
	Status                         string
	Filter                         Filter
	Matched, Done, Applied, Failed int
	CreatedBy                      string
	CreatedAt                      time.Time
	FinishedAt                     time.Time // done or cancelled
	CancelledBy                    string    // "" unless cancelled
}

// IncidentReader finds an incident for an incident filter.
type IncidentReader interface {
	Get(ctx context.Context, id string) (incidents.Incident, error)
}

// Store keeps replays in Postgres and matches filters against the events
// listed as failed or rejected (ops_event_problems).
type Store struct {
	pool      *pgxpool.Pool
	incidents IncidentReader
	// The tables a replay selects from are read through their owners.
	problems *opsdata.Problems
	dead     *outbox.Store
	ledger   *ledger.Ledger
	now      func() time.Time
	// page and maxItems are matchPage and MaxItems (tests lower them).
	page, maxItems int
}

// NewStore returns a Store.
func NewStore(pool *pgxpool.Pool, inc IncidentReader) *Store {
	return &Store{pool: pool, incidents: inc, now: time.Now, page: matchPage, maxItems: MaxItems,
		problems: opsdata.NewProblems(pool, slog.Default()), dead: outbox.NewStore(pool, slog.Default(), nil), ledger: ledger.New(pool)}
}

// match calls each with every event (or dead letter) f selects, oldest
// first, reading them a page at a time; an error from each stops it.
func (s *Store) match(ctx context.Context, f Filter, each func(Item) error) error {
	if err := s.checkFilter(f); err != nil {
		return err
	}
	var cause string
	typ, account := f.Type, f.StripeAccount
	if f.Incident != "" {
		inc, err := s.incidents.Get(ctx, f.Incident)
		if errors.Is(err, apperr.ErrNotFound) {
			return apperr.Invalid("no incident %s", f.Incident)
		}
		if err != nil {
			return fmt.Errorf("read incident %s: %w", f.Incident, err)
		}
		if inc.Kind == incidents.KindDelivery {
			if (f.Status != "" && f.Status != StatusDead) || f.Type != "" || f.StripeAccount != "" {
				return apperr.Invalid("incident %s is of dead letters: name it alone, or with since and until", f.Incident)
			}
			return s.matchDead(ctx, inc.EventType, inc.Cause, f, each)
		}
		if f.Status == StatusDead {
			return apperr.Invalid("incident %s is not of dead letters: status dead selects outbox dead letters", f.Incident)
		}
		if inc.Kind != incidents.KindEvent || strings.HasPrefix(inc.Cause, "hydration.") {
			return apperr.Invalid("incident %s is a %s incident (%s): only failed and rejected events and dead letters are replayed; thin events are retried by the hydrator", f.Incident, inc.Kind, inc.Cause)
		}
		if (typ != "" && typ != inc.EventType) || (account != "" && account != inc.StripeAccount) {
			return nil
		}
		cause, typ, account = inc.Cause, inc.EventType, inc.StripeAccount
	}
	if f.Status == StatusDead {
		return s.matchDead(ctx, f.Type, "", f, each)
	}
	// Keyset pages on (at, event_id), the order a replay re-drives in.
	var (
		afterAt *time.Time
		afterID string
	)
	for {
		problems, err := s.problems.Oldest(ctx, opsdata.ProblemFilter{Outcome: f.Status, EventType: typ, StripeAccount: account,
			Since: f.Since, Until: f.Until, AfterAt: afterAt, AfterID: afterID}, s.page)
		if err != nil {
			return fmt.Errorf("match replay filter: %w", err)
		}
		page := make([]Item, len(problems))
		for i, p := range problems {
			page[i] = Item{Kind: string(incidents.KindEvent), EventID: p.EventID, EventType: p.EventType,
				StripeAccount: p.StripeAccount, Status: p.Outcome, Error: p.Error, At: p.At}
		}
		for _, it := range page {
			if cause != "" && failcause.OfEvent(it.Status, it.Error) != cause {
				continue
			}
			if err := each(it); err != nil {
				return err
			}
		}
		if len(page) < s.page {
			return nil
		}
		last := page[len(page)-1]
		afterAt, afterID = &last.At, last.EventID
	}
}

// checkFilter refuses a filter that selects nothing sensible.
func (s *Store) checkFilter(f Filter) error {
	if f.Empty() {
		return apperr.Invalid("an empty filter without a time range would replay everything; name an incident, status, type, stripe_account, since or until")
	}
	if !ValidFilterStatus(f.Status) {
		return apperr.Invalid("status must be failed, rejected or dead")
	}
	if f.Status == StatusDead && f.StripeAccount != "" {
		return apperr.Invalid("dead letters have no stripe_account: filter them by type (topic/type), since and until")
	}
	if f.Since != nil && f.Until != nil && !f.Since.Before(*f.Until) {
		return apperr.Invalid("since must be before until")
	}
	return nil
}

// DryRun says how many events f matches and what replaying a sample of
// them would do. It changes nothing.
func (s *Store) DryRun(ctx context.Context, f Filter) (Preview, error) {
	matched := 0
	sample := []Item{}
	err := s.match(ctx, f, func(it Item) error {
		matched++
		if len(sample) < SampleSize {
			sample = append(sample, it)
		}
		return nil
	})
	if err != nil {
		return Preview{}, err
	}
	ids := make([]string, len(sample))
	for i, it := range sample {
		ids[i] = it.EventID
	}
	applied, err := s.ledger.ProcessedOf(ctx, ids)
	if err != nil {
		return Preview{}, fmt.Errorf("dry run: %w", err)
	}
	for i := range sample {
		sample[i].Would = "apply"
		if sample[i].Kind == string(incidents.KindDelivery) {
			sample[i].Would = "redrive"
		} else if applied[sample[i].EventID] {
			sample[i].Would = "duplicate"
		}
	}
	return Preview{Matched: matched, Sample: sample}, nil
}

// Start records a replay of what f matches, asked for by actor, for the
// runner to carry out. A filter matching nothing, or over MaxItems, is
// refused (apperr.ErrInvalid), and so is a replay while MaxRunning run
// (apperr.ErrConflict); nothing is written then. The matched items are
// copied into replay_items a page at a time, in the transaction that
// records the replay.
func (s *Store) Start(ctx context.Context, f Filter, actor string) (Replay, error) {
	if err := s.checkFilter(f); err != nil {
		return Replay{}, err
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Replay{}, fmt.Errorf("replay id: %w", err)
	}
	r := Replay{ID: "rpl_" + hex.EncodeToString(b[:]), Status: StatusRunning, Filter: f,
		CreatedBy: actor, CreatedAt: s.now().UTC()}
	raw, err := json.Marshal(f)
	if err != nil {
		return Replay{}, fmt.Errorf("replay filter: %w", err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Starts take turns, so that two cannot both see room for one more.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('replays.start'))`); err != nil {
			return fmt.Errorf("lock replay starts: %w", err)
		}
		var running int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM replays WHERE status = 'running'`).Scan(&running); err != nil {
			return fmt.Errorf("count running replays: %w", err)
		}
		if running >= MaxRunning {
			return apperr.New(apperr.CodeConflict, "%d replays are running, the most at once: wait for one to finish, or cancel one", running)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO replays (id, filter, status, matched, created_by, created_at) VALUES ($1, $2, $3, 0, $4, $5)`,
			r.ID, raw, r.Status, actor, r.CreatedAt); err != nil {
			return fmt.Errorf("insert replay: %w", err)
		}
		// The match is read on another connection, a page at a time; this
		// one copies each page.
		page := make([][]any, 0, s.page)
		flush := func() error {
			if len(page) == 0 {
				return nil
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"replay_items"}, []string{"replay_id", "seq", "kind", "event_id", "stripe_account"},
				pgx.CopyFromRows(page)); err != nil {
				return fmt.Errorf("insert replay items: %w", err)
			}
			page = page[:0]
			return nil
		}
		err := s.match(ctx, f, func(it Item) error {
			if r.Matched == s.maxItems {
				return errTooMany
			}
			page = append(page, []any{r.ID, r.Matched, it.Kind, it.EventID, it.StripeAccount})
			r.Matched++
			if len(page) == s.page {
				return flush()
			}
			return nil
		})
		switch {
		case errors.Is(err, errTooMany):
			return apperr.Invalid("the filter matches more than the %d events one replay takes: narrow it (since/until)", s.maxItems)
		case err != nil:
			return err
		}
		if err := flush(); err != nil {
			return err
		}
		if r.Matched == 0 {
			return apperr.Invalid("the filter matches no failed or rejected event (or dead letter): nothing to replay")
		}
		if _, err := tx.Exec(ctx, `UPDATE replays SET matched = $2 WHERE id = $1`, r.ID, r.Matched); err != nil {
			return fmt.Errorf("count replay items: %w", err)
		}
		return nil
	})
	if err != nil {
		return Replay{}, err
	}
	return r, nil
}

// errTooMany stops a match past Store.maxItems.
var errTooMany = errors.New("too many items")

// Get returns replay id.
func (s *Store) Get(ctx context.Context, id string) (Replay, error) {
	var (
		r         Replay
		raw       []byte
		finished  *time.Time
		cancelled *string
	)
	err := s.pool.QueryRow(ctx, `SELECT id, status, filter, matched, done, applied, failed, created_by, created_at, finished_at, cancelled_by
		FROM replays WHERE id = $1`, id).Scan(&r.ID, &r.Status, &raw, &r.Matched, &r.Done, &r.Applied, &r.Failed, &r.CreatedBy, &r.CreatedAt, &finished, &cancelled)
	if errors.Is(err, pgx.ErrNoRows) {
		return Replay{}, apperr.New(apperr.CodeNotFound, "replay not found")
	}
	if err != nil {
		return Replay{}, fmt.Errorf("read replay %s: %w", id, err)
	}
	if err := json.Unmarshal(raw, &r.Filter); err != nil {
		return Replay{}, fmt.Errorf("read replay %s filter: %w", id, err)
	}
	if finished != nil {
		r.FinishedAt = *finished
	}
	if cancelled != nil {
		r.CancelledBy = *cancelled
	}
	return r, nil
}

// Cancel stops running replay id on behalf of actor, who is recorded with
// the time on the replay (its audit row; the database's clock, as a
// finish's). The runner re-drives no item after the one in hand, which it
// leaves unrecorded (runner.go): a later replay finds it processed, or
// re-drives it and the ledger answers duplicate. The items not re-driven
// stay failed, for a later replay. apperr.ErrConflict (Cancel's one
// conflict): the replay is done or cancelled already; nothing changed.
func (s *Store) Cancel(ctx context.Context, id, actor string) (Replay, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE replays SET status = 'cancelled', cancelled_by = $2, finished_at = now(),
			lease_owner = NULL, leased_until = NULL
		WHERE id = $1 AND status = 'running'`, id, actor)
	if err != nil {
		return Replay{}, fmt.Errorf("cancel replay %s: %w", id, err)
	}
	r, err := s.Get(ctx, id)
	if err != nil {
		return Replay{}, err
	}
	if tag.RowsAffected() == 0 {
		return r, apperr.New(apperr.CodeConflict, "replay %s is %s: only a running replay can be cancelled", id, r.Status)
	}
	return r, nil
}

// matchDead calls each with the outbox dead letters of topic/type typ (""
// any) and cause class ("" any: a delivery incident's cause selects its
// own), within f's time range on dead_at, oldest first, a page at a time.
func (s *Store) matchDead(ctx context.Context, typ, cause string, f Filter, each func(Item) error) error {
	var (
		afterAt *time.Time
		afterID uuid.UUID
	)
	for {
		dead, err := s.dead.OldestDead(ctx, outbox.DeadFilter{TopicType: typ, Since: f.Since, Until: f.Until,
			AfterAt: afterAt, AfterID: afterID}, s.page)
		if err != nil {
			return fmt.Errorf("match dead letters: %w", err)
		}
		page := make([]Item, len(dead))
		for i, d := range dead {
			page[i] = Item{Kind: string(incidents.KindDelivery), Status: "dead", EventID: d.ID.String(),
				EventType: d.Topic + "/" + d.Type, Error: d.LastError, At: d.DeadAt}
		}
		for _, it := range page {
			if cause != "" && failcause.Classify(it.Error) != cause {
				continue
			}
			if err := each(it); err != nil {
				return err
			}
		}
		if len(page) < s.page {
			return nil
		}
		last := dead[len(dead)-1]
		afterAt, afterID = &last.DeadAt, last.ID
	}
}
