package tracking

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// Store is the purchase API's and the internal API's access to the tracking
// tables. Event-driven transitions go through Flows instead, inside the
// handler's transaction.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a store over pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// NewPurchase is what the purchase API knows before it talks to Stripe.
type NewPurchase struct {
	ID             uuid.UUID // generated when zero
	Account        uuid.UUID
	StripeAccount  string
	Kind           Kind
	Customer       string // product purchases
	IdempotencyKey string // the client's Idempotency-Key, "" for none
	RequestHash    string // digest of the request, compared on a retry
}

const purchaseColumns = `p.id, p.created, p.last_updated, p.account, p.stripe_account, p.kind, p.fulfilled, p.fulfilled_at,
	coalesce(p.customer, ''), coalesce(p.payment_intent, ''), coalesce(p.invoice, ''), coalesce(p.subscription, ''),
	coalesce(pay.status::text, ''), coalesce(sub.status::text, ''), coalesce(p.last_event_id, ''), p.last_event_created`

const purchaseFrom = ` FROM purchases p
	LEFT JOIN payments pay ON pay.id = p.payment_intent
	LEFT JOIN subscriptions sub ON sub.id = p.subscription `

func scanPurchase(row pgx.Row) (Purchase, error) {
	var p Purchase
	err := row.Scan(&p.ID, &p.Created, &p.LastUpdated, &p.Account, &p.StripeAccount, &p.Kind, &p.Fulfilled, &p.FulfilledAt,
		&p.Customer, &p.PaymentIntent, &p.Invoice, &p.Subscription, &p.PaymentStatus, &p.SubscriptionStatus,
		&p.LastEventID, &p.LastEventCreated)
	return p, err
}

// CreatePurchase stores a new, incomplete purchase. With an idempotency key
// that this account already used, it returns the existing purchase and
// created=false, or ErrIdempotencyMismatch when the request differs.
func (s *Store) CreatePurchase(ctx context.Context, np NewPurchase) (p Purchase, created bool, err error) {
	if np.ID == uuid.Nil {
		np.ID = uuid.New()
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO purchases (id, account, stripe_account, kind, customer, idempotency_key, request_hash)
		VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($6, ''), nullif($7, ''))
		ON CONFLICT (account, idempotency_key) DO NOTHING`,
		np.ID, np.Account, np.StripeAccount, np.Kind, np.Customer, np.IdempotencyKey, np.RequestHash)
	if err != nil {
		return Purchase{}, false, fmt.Errorf("insert purchase: %w", translate(err))
	}
	if tag.RowsAffected() == 1 {
		p, err := s.GetPurchase(ctx, np.ID)
		return p, true, err
	}
	var id uuid.UUID
	var hash string
	err = s.pool.QueryRow(ctx, `SELECT id, coalesce(request_hash, '') FROM purchases WHERE account = $1 AND idempotency_key = $2`,
		np.Account, np.IdempotencyKey).Scan(&id, &hash)
	if err != nil {
		return Purchase{}, false, fmt.Errorf("find purchase by idempotency key: %w", err)
	}
	if hash != np.RequestHash {
		return Purchase{}, false, ErrIdempotencyMismatch
	}
	p, err = s.GetPurchase(ctx, id)
	return p, false, err
}

// GetPurchase reads a purchase.
func (s *Store) GetPurchase(ctx context.Context, id uuid.UUID) (Purchase, error) {
	p, err := scanPurchase(s.pool.QueryRow(ctx, `SELECT `+purchaseColumns+purchaseFrom+`WHERE p.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Purchase{}, apperr.New(apperr.CodeNotFound, "purchase %s not found", id)
	}
	if err != nil {
		return Purchase{}, fmt.Errorf("read purchase %s: %w", id, err)
	}
	return p, nil
}

// GetPayment reads a payment.
func (s *Store) GetPayment(ctx context.Context, id string) (Payment, error) {
	return getTracked(ctx, s, "payments", "payment", id, func(p *Payment) []any {
		return []any{&p.ID, &p.Created, &p.LastUpdated, &p.Account, &p.StripeAccount, &p.Purchase, &p.Status, &p.LastEventID, &p.LastEventCreated}
	})
}

// GetSubscription reads a subscription.
func (s *Store) GetSubscription(ctx context.Context, id string) (Subscription, error) {
	return getTracked(ctx, s, "subscriptions", "subscription", id, func(p *Subscription) []any {
		return []any{&p.ID, &p.Created, &p.LastUpdated, &p.Account, &p.StripeAccount, &p.Purchase, &p.Status, &p.LastEventID, &p.LastEventCreated}
	})
}

// getTracked reads one row of payments or subscriptions (table; what names
// it in errors), whose columns are the same: fields lists where each goes.
func getTracked[T any](ctx context.Context, s *Store, table, what, id string, fields func(*T) []any) (T, error) {
	var row, zero T
	err := s.pool.QueryRow(ctx, `SELECT id, created, last_updated, account, stripe_account, purchase, status,
		coalesce(last_event_id, ''), last_event_created FROM `+table+` WHERE id = $1`, id).Scan(fields(&row)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, apperr.New(apperr.CodeNotFound, "%s %s not found", what, id)
	}
	if err != nil {
		return zero, fmt.Errorf("read %s %s: %w", what, id, err)
	}
	return row, nil
}

// RecordPayment stores the purchase's PaymentIntent (and invoice, for a
// one-off product purchase) and its incomplete payment, in one transaction.
// Repeating it is harmless; an event that got there first already inserted
// the payment.
func (s *Store) RecordPayment(ctx context.Context, purchase uuid.UUID, paymentIntent, invoice string) error {
	err := s.attach(ctx, purchase, `payment_intent = $2, invoice = coalesce(nullif($3, ''), invoice)`, "payments", paymentIntent, invoice)
	if err != nil {
		return fmt.Errorf("record payment %s of purchase %s: %w", paymentIntent, purchase, err)
	}
	return nil
}

// RecordInvoice stores the invoice of a one-off product purchase before it
// has a PaymentIntent.
func (s *Store) RecordInvoice(ctx context.Context, purchase uuid.UUID, invoice string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE purchases SET invoice = $2 WHERE id = $1`, purchase, invoice); err != nil {
		return fmt.Errorf("record invoice %s of purchase %s: %w", invoice, purchase, translate(err))
	}
	return nil
}

// MarkPaymentPaid is the purchase API's "store completed payment": Stripe
// answered that the invoice is paid. new or failed -> paid (a failed
// attempt can be followed by a success); paid is left alone.
func (s *Store) MarkPaymentPaid(ctx context.Context, paymentIntent string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE payments SET status = 'paid' WHERE id = $1 AND status IN ('new', 'failed')`, paymentIntent); err != nil {
		return fmt.Errorf("mark payment %s paid: %w", paymentIntent, translate(err))
	}
	return nil
}

// RecordSubscription stores the purchase's Stripe subscription, new: the
// activation event moves it to active and fulfils the purchase.
func (s *Store) RecordSubscription(ctx context.Context, purchase uuid.UUID, subscription string) error {
	err := s.attach(ctx, purchase, `subscription = $2`, "subscriptions", subscription)
	if err != nil {
		return fmt.Errorf("record subscription %s of purchase %s: %w", subscription, purchase, err)
	}
	return nil
}

// attach links a purchase to its payment or subscription id and inserts
// that row (table, new) in one transaction: set is the purchases update,
// with $1 the purchase, $2 id and $3… more. An existing row is left alone
// (an event that got there first inserted it); apperr not found without
// the purchase.
func (s *Store) attach(ctx context.Context, purchase uuid.UUID, set, table, id string, more ...any) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE purchases SET `+set+` WHERE id = $1`, append([]any{purchase, id}, more...)...)
		if err != nil {
			return translate(err)
		}
		if tag.RowsAffected() == 0 {
			return apperr.New(apperr.CodeNotFound, "purchase %s not found", purchase)
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+table+` (id, account, stripe_account, purchase)
			SELECT $2, account, stripe_account, id FROM purchases WHERE id = $1
			ON CONFLICT (id) DO NOTHING`, purchase, id)
		return translate(err)
	})
}
