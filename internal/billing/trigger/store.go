package trigger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/collect"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// Status of a recorded trigger.
const (
	// StatusPending: recorded, not collected yet (the row's 'running',
	// the lease package's word for work to do).
	StatusPending = "pending"
	StatusDone    = "done"
)

// ErrReferenceConflict: the reference was recorded for another account or
// kind. The platform reuses a reference only for the same event, so this
// is a mistake to look at, never a second trigger.
var ErrReferenceConflict = apperr.New(apperr.CodeConflict, "reference already recorded for another account or kind")

// Period is what a trigger did with one unpaid period, as recorded.
type Period struct {
	SubscriptionID string `json:"subscription_id"`
	BillingDate    string `json:"billing_date"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Outcome        string `json:"outcome"`
	AttemptNo      int    `json:"attempt,omitempty"`
	PaymentIntent  string `json:"payment_intent,omitempty"`
	DeclineCode    string `json:"decline_code,omitempty"`
	Error          string `json:"error,omitempty"`
}

// Record is a recorded trigger and what it did.
type Record struct {
	ID         string
	Trigger    Trigger
	Source     string
	MessageID  string
	Status     string
	Outcome    string // "" while pending
	Process    model.Process
	Today      string
	Attempts   int
	Periods    []Period
	Tries      int
	Error      string
	Duplicates int
	CreatedAt  time.Time
	// ProcessedAt is zero while pending.
	ProcessedAt time.Time
}

// Store keeps triggers in Postgres.
type Store struct {
	pool *pgxpool.Pool
	now  func() time.Time
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, now: time.Now} }

var idPattern = regexp.MustCompile(`^trg_[0-9a-f]{24}$`)

// ValidID reports whether id can be a trigger's id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

func newID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("trigger id: %w", err)
	}
	return "trg_" + hex.EncodeToString(b[:]), nil
}

// Record writes t, from source, for the processor to collect. A reference
// already recorded for the same account and kind writes nothing new: the
// earlier trigger is returned with duplicate true (and its duplicate count
// raised); for another account or kind it is ErrReferenceConflict.
func (s *Store) Record(ctx context.Context, t Trigger, source, messageID string) (rec Record, duplicate bool, err error) {
	id, err := newID()
	if err != nil {
		return Record{}, false, err
	}
	now := s.now().UTC()
	var msg any
	if messageID != "" {
		msg = messageID
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO billing_triggers (id, reference, account_id, kind, occurred_at, source, message_id,
			status, process, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'running', $8, $9) ON CONFLICT (reference) DO NOTHING`,
		id, t.Reference, t.AccountID, string(t.Kind), t.OccurredAt, source, msg, string(t.Kind.Process()), now)
	if err != nil {
		return Record{}, false, fmt.Errorf("record trigger %s: %w", t.Reference, err)
	}
	if tag.RowsAffected() == 1 {
		rec, err := s.Get(ctx, id)
		return rec, false, err
	}
	// The reference is recorded: the same trigger again, or a conflict.
	row := s.pool.QueryRow(ctx, `UPDATE billing_triggers SET duplicates = duplicates + 1, last_duplicate_at = $4
		WHERE reference = $1 AND account_id = $2 AND kind = $3 RETURNING `+columns, t.Reference, t.AccountID, string(t.Kind), now)
	rec, err = scan(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, fmt.Errorf("reference %q: %w", t.Reference, ErrReferenceConflict)
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("record duplicate of trigger %s: %w", t.Reference, err)
	}
	return rec, true, nil
}

const columns = `id, reference, account_id, kind, occurred_at, source, coalesce(message_id, ''), status, coalesce(outcome, ''),
	process, coalesce(today, ''), attempts, periods, tries, coalesce(error, ''), duplicates, created_at, processed_at`

func scan(row pgx.Row) (Record, error) {
	var (
		r         Record
		kind      string
		proc      string
		raw       []byte
		processed *time.Time
	)
	if err := row.Scan(&r.ID, &r.Trigger.Reference, &r.Trigger.AccountID, &kind, &r.Trigger.OccurredAt, &r.Source, &r.MessageID,
		&r.Status, &r.Outcome, &proc, &r.Today, &r.Attempts, &raw, &r.Tries, &r.Error, &r.Duplicates, &r.CreatedAt, &processed); err != nil {
		return Record{}, err
	}
	r.Trigger.Kind, r.Process = Kind(kind), model.Process(proc)
	if r.Status == "running" {
		r.Status = StatusPending
	}
	if processed != nil {
		r.ProcessedAt = *processed
	}
	r.Periods = []Period{}
	if err := json.Unmarshal(raw, &r.Periods); err != nil {
		return Record{}, fmt.Errorf("trigger %s periods: %w", r.ID, err)
	}
	return r, nil
}

// Get returns trigger id.
func (s *Store) Get(ctx context.Context, id string) (Record, error) {
	r, err := scan(s.pool.QueryRow(ctx, `SELECT `+columns+` FROM billing_triggers WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, apperr.New(apperr.CodeNotFound, "trigger %s not found", id)
	}
	if err != nil {
		return Record{}, fmt.Errorf("read trigger %s: %w", id, err)
	}
	return r, nil
}

// ForAccount lists the account's latest n triggers, newest first (the
// console's account page).
func (s *Store) ForAccount(ctx context.Context, account string, n int) ([]Record, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+columns+` FROM billing_triggers WHERE account_id = $1
		ORDER BY created_at DESC, id DESC LIMIT $2`, account, n)
	if err != nil {
		return nil, fmt.Errorf("triggers of %s: %w", account, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) { return scan(row) })
	if err != nil {
		return nil, fmt.Errorf("triggers of %s: %w", account, err)
	}
	return out, nil
}

// Refused is one queue message that is not a trigger.
type Refused struct {
	MessageID    string
	Reason       string
	Error        string
	Body         string
	ReceiveCount int
	FirstSeen    time.Time
	LastSeen     time.Time
}

// maxRefusedBody bounds the body kept of a refused message.
const maxRefusedBody = 2 << 10

// RecordRefusal keeps a refused message's reason (once per message id; a
// redelivery updates its receive count).
func (s *Store) RecordRefusal(ctx context.Context, messageID string, ref *Refusal, body string, receiveCount int) error {
	if len(body) > maxRefusedBody {
		body = body[:maxRefusedBody]
	}
	now := s.now().UTC()
	_, err := s.pool.Exec(ctx, `INSERT INTO billing_trigger_refusals (message_id, reason, error, body, receive_count, first_seen, last_seen)
		VALUES ($1, $2, $3, $4, $5, $6, $6)
		ON CONFLICT (message_id) DO UPDATE SET receive_count = EXCLUDED.receive_count, last_seen = EXCLUDED.last_seen`,
		messageID, ref.Reason, ref.Err.Error(), body, receiveCount, now)
	if err != nil {
		return fmt.Errorf("record refused message %s: %w", messageID, err)
	}
	return nil
}

// Refusals lists the latest n refused messages, newest first.
func (s *Store) Refusals(ctx context.Context, n int) ([]Refused, error) {
	rows, err := s.pool.Query(ctx, `SELECT message_id, reason, error, body, receive_count, first_seen, last_seen
		FROM billing_trigger_refusals ORDER BY last_seen DESC LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("refused trigger messages: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Refused, error) {
		var r Refused
		err := row.Scan(&r.MessageID, &r.Reason, &r.Error, &r.Body, &r.ReceiveCount, &r.FirstSeen, &r.LastSeen)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("refused trigger messages: %w", err)
	}
	return out, nil
}

// Pending counts the triggers recorded and not collected yet (a gauge).
func (s *Store) Pending(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM billing_triggers WHERE status = 'running'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count pending triggers: %w", err)
	}
	return n, nil
}

// periodsOf renders what the billing core did.
func periodsOf(res collect.TriggerResult) []Period {
	out := make([]Period, 0, len(res.Periods))
	for _, p := range res.Periods {
		out = append(out, Period{SubscriptionID: p.SubscriptionID, BillingDate: p.BillingDate.String(), Amount: p.Amount,
			Currency: p.Currency, Outcome: p.Outcome, AttemptNo: p.AttemptNo, PaymentIntent: p.PaymentIntent,
			DeclineCode: p.DeclineCode, Error: p.Error})
	}
	return out
}
