package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/pgtx"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// InvoiceFetcher reads an invoice from Stripe (GET /v1/invoices/{id} on the
// connected account) and returns its JSON.
type InvoiceFetcher func(ctx context.Context, stripeAccount, invoiceID string) (json.RawMessage, error)

// FlowsConfig configures Flows.
type FlowsConfig struct {
	Log *slog.Logger
	// Invoices looks up an invoice the payload does not expand.
	Invoices InvoiceFetcher
	// LookupTimeout bounds one invoice lookup, Stripe's retries included
	// (default 10 s).
	LookupTimeout time.Duration
	// Now replaces time.Now (fulfilment and action times).
	Now func() time.Time
	// Processed, when set, is asked before a Stripe lookup: an event the
	// ledger already holds needs none (its appliers will not run).
	Processed func(ctx context.Context, eventID string) (bool, error)
}

// Flows are the event-driven state machines of the tracking database: the
// appliers the handler runs inside its one transaction per event, and the
// preparers it runs before (Stripe lookups never hold a transaction open).
// Which event type runs which of them is the handler's route table
// (handler.NewRoutes).
type Flows struct {
	log      *slog.Logger
	invoices InvoiceFetcher
	timeout  time.Duration
	now      func() time.Time
	// processed is asked before a Stripe lookup; nil means always look up.
	processed func(ctx context.Context, eventID string) (bool, error)
}

// NewFlows returns the flows.
func NewFlows(cfg FlowsConfig) *Flows {
	f := &Flows{log: cfg.Log, invoices: cfg.Invoices, timeout: cfg.LookupTimeout, now: cfg.Now, processed: cfg.Processed}
	if f.log == nil {
		f.log = slog.Default()
	}
	if f.timeout == 0 {
		f.timeout = 10 * time.Second
	}
	if f.now == nil {
		f.now = time.Now
	}
	return f
}

// event is what the flows use of a Stripe event.
type event struct {
	id            string
	typ           string
	stripeAccount string
	created       time.Time
	log           *slog.Logger
}

func (f *Flows) event(ev *stripe.Event) event {
	return event{
		id: ev.ID, typ: string(ev.Type), stripeAccount: ev.Account,
		created: time.Unix(ev.Created, 0).UTC(),
		log:     f.log.With("event_id", ev.ID, "event_type", string(ev.Type), "stripe_account", ev.Account),
	}
}

// stale reports whether an event created at created is older than the last
// event applied to a row: it must not touch that row. On a same-second tie
// the event applies, and since every transition only moves forward, a tie can
// only ever move a row forward.
func stale(last *time.Time, created time.Time) bool {
	return last != nil && created.Before(*last)
}

// purchaseRow is a locked purchase.
type purchaseRow struct {
	ID            uuid.UUID
	Account       uuid.UUID
	StripeAccount string
	Kind          Kind
	Fulfilled     bool
}

// lockPurchase reads and locks a purchase. Lock order is always purchase,
// then its payment or subscription, so concurrent events never deadlock.
func lockPurchase(ctx context.Context, tx pgtx.Tx, id uuid.UUID) (*purchaseRow, error) {
	var p purchaseRow
	err := tx.QueryRow(ctx, `SELECT id, account, stripe_account, kind, fulfilled FROM purchases WHERE id = $1 FOR UPDATE`, id).
		Scan(&p.ID, &p.Account, &p.StripeAccount, &p.Kind, &p.Fulfilled)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock purchase %s: %w", id, err)
	}
	return &p, nil
}

// hint is a purchase reference read from Stripe metadata
// (metadata.purchase_id, metadata.account).
type hint struct {
	purchase uuid.UUID
	account  string
}

func hintFrom(metadata map[string]string) (hint, bool) {
	id, err := uuid.Parse(metadata["purchase_id"])
	if err != nil {
		return hint{}, false
	}
	return hint{purchase: id, account: metadata["account"]}, true
}

// purchaseFromHint locks the purchase a metadata hint names, if it exists and
// belongs to the event's Stripe account (and to the hinted account): metadata
// is merchant-writable, so it never crosses accounts.
func purchaseFromHint(ctx context.Context, tx pgtx.Tx, e event, h hint) (*purchaseRow, error) {
	p, err := lockPurchase(ctx, tx, h.purchase)
	if err != nil || p == nil {
		return nil, err
	}
	if p.StripeAccount != e.stripeAccount || (h.account != "" && h.account != p.Account.String()) {
		e.log.Warn("metadata names a purchase of another account: ignored", "purchase_id", h.purchase)
		return nil, nil
	}
	return p, nil
}

// fulfil moves the purchase new -> fulfilled and enqueues its
// purchase.fulfilled action, once.
func (f *Flows) fulfil(ctx context.Context, tx pgtx.Tx, e event, p *purchaseRow, subscription string) error {
	log := e.log.With("purchase_id", p.ID)
	if p.Fulfilled {
		log.Info("purchase already fulfilled")
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE purchases SET fulfilled = true, fulfilled_at = $2, last_event_id = $3, last_event_created = $4 WHERE id = $1`,
		p.ID, f.now(), e.id, e.created); err != nil {
		return fmt.Errorf("fulfil purchase %s: %w", p.ID, translate(err))
	}
	p.Fulfilled = true
	a := actions.Action{Type: actions.TypePurchaseFulfilled, Account: p.Account.String(), StripeAccount: p.StripeAccount,
		PurchaseID: ptr(p.ID.String())}
	if subscription != "" {
		a.SubscriptionID = ptr(subscription)
	}
	if _, err := actions.Enqueue(ctx, tx, a, actions.DedupeKey(a.Type, p.ID.String()), f.now()); err != nil {
		return err
	}
	log.Info("purchase fulfilled", "subscription", subscription)
	return nil
}

func ptr[T any](v T) *T { return &v }

// unprocessable reports a payload its flow cannot act on: it does not decode
// into Stripe's type, or it names ids Stripe never issues. The handler
// records such an event as processed with no effect (retrying cannot help)
// instead of failing it forever.
func unprocessable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", stripeevent.ErrUnprocessable, fmt.Sprintf(format, args...))
}

// clip bounds a payload string quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
