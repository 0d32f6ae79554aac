// Package batchrun is the batch collection of docs/design.md §4 and §8: an
// operator's selection of subscriptions with an ERROR period is recorded
// durably in Postgres and charged in the background, each subscription's
// oldest ERROR period exactly as pay now (collect.Collector.BatchCharge),
// process BATCH, within the Stripe API budget at the charges class,
// resuming after a restart without charging anything twice. The patterns
// are the bulk replay's (internal/replay): items fixed when the batch is
// asked for, a lease on the running batch, each outcome recorded with the
// counters in one transaction.
package batchrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/collect"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// MaxItems bounds one batch: a selection matching more is refused, to be
// narrowed (account_ids, since, until).
const MaxItems = 5000

// Status of a batch.
const (
	StatusRunning = "running"
	StatusDone    = "done"
)

// Selector is the billing core's side of a batch (collect.Collector).
type Selector interface {
	SelectBatch(ctx context.Context, sel collect.BatchSelection) ([]collect.BatchCandidate, error)
}

// Selection is a batch's selection as recorded (and shown).
type Selection struct {
	AccountIDs []string `json:"account_ids,omitempty"`
	Since      string   `json:"since,omitempty"`
	Until      string   `json:"until,omitempty"`
}

// SelectionOf renders sel.
func SelectionOf(sel collect.BatchSelection) Selection {
	out := Selection{AccountIDs: sel.AccountIDs}
	if !sel.Since.IsZero() {
		out.Since = sel.Since.String()
	}
	if !sel.Until.IsZero() {
		out.Until = sel.Until.String()
	}
	return out
}

// Item is one selected subscription and what the batch did with it.
type Item struct {
	Seq            int
	AccountID      string
	SubscriptionID string
	BillingDate    string
	Amount         int64
	Currency       string
	// Outcome is "" until done (collect.Batch* outcomes, or "failed").
	Outcome       string
	PaymentIntent string
	DeclineCode   string
	Error         string
}

// Batch is one batch collection and its progress.
type Batch struct {
	ID                                                         string
	Status                                                     string
	Selection                                                  Selection
	Matched, Done, Paid, Processing, Declined, Skipped, Failed int
	CreatedBy                                                  string
	CreatedAt                                                  time.Time
	FinishedAt                                                 time.Time
	Items                                                      []Item
}

// Store keeps batches in Postgres (docs/billing.md says why there and not
// in the billing table).
type Store struct {
	pool *pgxpool.Pool
	sel  Selector
	now  func() time.Time
}

// NewStore returns a Store selecting through sel.
func NewStore(pool *pgxpool.Pool, sel Selector) *Store {
	return &Store{pool: pool, sel: sel, now: time.Now}
}

// match runs the selection; a bad one is apperr.ErrInvalid (billing's
// refusal as it is).
func (s *Store) match(ctx context.Context, sel collect.BatchSelection) ([]collect.BatchCandidate, error) {
	c, err := s.sel.SelectBatch(ctx, sel)
	if errors.Is(err, apperr.ErrInvalid) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("batch selection: %w", err)
	}
	if len(c) == 0 {
		return nil, apperr.Invalid("the selection matches no subscription with an ERROR period: nothing to collect")
	}
	if len(c) > MaxItems {
		return nil, apperr.Invalid("the selection matches %d subscriptions, over the %d one batch takes: narrow it (account_ids, since, until)", len(c), MaxItems)
	}
	return c, nil
}

// DryRun lists what a batch of sel would charge (and which subscriptions it
// would skip, and why). It changes nothing; a selection matching nothing is
// apperr.ErrInvalid.
func (s *Store) DryRun(ctx context.Context, sel collect.BatchSelection) ([]collect.BatchCandidate, error) {
	return s.match(ctx, sel)
}

// Start records a batch of what sel matches, asked for by actor, for the
// runner to carry out. A selection matching nothing, or over MaxItems, is
// refused and nothing is written.
func (s *Store) Start(ctx context.Context, sel collect.BatchSelection, actor string) (Batch, error) {
	cands, err := s.match(ctx, sel)
	if err != nil {
		return Batch{}, err
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Batch{}, fmt.Errorf("batch id: %w", err)
	}
	out := Batch{ID: "bat_" + hex.EncodeToString(b[:]), Status: StatusRunning, Selection: SelectionOf(sel),
		Matched: len(cands), CreatedBy: actor, CreatedAt: s.now().UTC()}
	raw, err := json.Marshal(out.Selection)
	if err != nil {
		return Batch{}, fmt.Errorf("batch selection: %w", err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO billing_batches (id, selection, status, matched, created_by, created_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, out.ID, raw, out.Status, out.Matched, actor, out.CreatedAt); err != nil {
			return fmt.Errorf("insert batch: %w", err)
		}
		rows := make([][]any, len(cands))
		for i, c := range cands {
			rows[i] = []any{out.ID, i, c.AccountID, c.SubscriptionID, c.BillingDate.String(), c.Amount, c.Currency}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"billing_batch_items"},
			[]string{"batch_id", "seq", "account_id", "subscription_id", "billing_date", "amount", "currency"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("insert batch items: %w", err)
		}
		return nil
	})
	if err != nil {
		return Batch{}, err
	}
	return out, nil
}

const batchColumns = `id, status, selection, matched, done, paid, processing, declined, skipped, failed, created_by, created_at, finished_at`

func scanBatch(row pgx.Row) (Batch, error) {
	var (
		b        Batch
		raw      []byte
		finished *time.Time
	)
	if err := row.Scan(&b.ID, &b.Status, &raw, &b.Matched, &b.Done, &b.Paid, &b.Processing, &b.Declined, &b.Skipped, &b.Failed,
		&b.CreatedBy, &b.CreatedAt, &finished); err != nil {
		return Batch{}, err
	}
	if err := json.Unmarshal(raw, &b.Selection); err != nil {
		return Batch{}, fmt.Errorf("batch %s selection: %w", b.ID, err)
	}
	if finished != nil {
		b.FinishedAt = *finished
	}
	return b, nil
}

// Get returns batch id with its items.
func (s *Store) Get(ctx context.Context, id string) (Batch, error) {
	b, err := scanBatch(s.pool.QueryRow(ctx, `SELECT `+batchColumns+` FROM billing_batches WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Batch{}, apperr.New(apperr.CodeNotFound, "batch not found")
	}
	if err != nil {
		return Batch{}, fmt.Errorf("read batch %s: %w", id, err)
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, account_id, subscription_id, billing_date, amount, currency,
			coalesce(outcome, ''), coalesce(payment_intent, ''), coalesce(decline_code, ''), coalesce(error, '')
		FROM billing_batch_items WHERE batch_id = $1 ORDER BY seq`, id)
	if err != nil {
		return Batch{}, fmt.Errorf("read batch %s items: %w", id, err)
	}
	b.Items, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Item, error) {
		var it Item
		err := row.Scan(&it.Seq, &it.AccountID, &it.SubscriptionID, &it.BillingDate, &it.Amount, &it.Currency,
			&it.Outcome, &it.PaymentIntent, &it.DeclineCode, &it.Error)
		return it, err
	})
	if err != nil {
		return Batch{}, fmt.Errorf("read batch %s items: %w", id, err)
	}
	return b, nil
}

// Recent lists the latest n batches, newest first, without their items
// (the console).
func (s *Store) Recent(ctx context.Context, n int) ([]Batch, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+batchColumns+` FROM billing_batches ORDER BY created_at DESC, id DESC LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Batch, error) { return scanBatch(row) })
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	return out, nil
}

// Running counts the batches not finished (the progress gauge).
func (s *Store) Running(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM billing_batches WHERE status = 'running'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count running batches: %w", err)
	}
	return n, nil
}

// ParseDate reads a selection date (YYYY-MM-DD).
func ParseDate(s string) (dates.Date, error) { return dates.Parse(s) }
