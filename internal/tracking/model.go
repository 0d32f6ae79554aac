package tracking

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// Errors are apperr's (a missing row is apperr.ErrNotFound, its message
// naming it); driver errors never leave this package untranslated where they
// have a domain meaning. The conflicts below are sentinels callers test with
// errors.Is.
var (
	// ErrIllegalTransition: the database refused a transition that is not in
	// the state diagrams.
	ErrIllegalTransition = apperr.New(apperr.CodeConflict, "illegal state transition")
	// ErrIdempotencyMismatch: an idempotency key was reused with a different
	// request.
	ErrIdempotencyMismatch = apperr.New(apperr.CodeConflict, "Idempotency-Key was already used with a different request")
)

// Kind of a purchase: which flow of the reference it follows.
type Kind string

const (
	KindLegacy    Kind = "legacy"    // PaymentIntent confirmed by the client
	KindOneOff    Kind = "one_off"   // product: invoice items, invoice, pay
	KindRecurring Kind = "recurring" // product: Stripe Subscription
)

// PaymentStatus is the payment_status enum.
type PaymentStatus string

const (
	PaymentNew    PaymentStatus = "new"
	PaymentPaid   PaymentStatus = "paid"
	PaymentFailed PaymentStatus = "failed"
)

// SubscriptionStatus is the subscription_status enum.
type SubscriptionStatus string

const (
	SubscriptionNew        SubscriptionStatus = "new"
	SubscriptionActive     SubscriptionStatus = "active"
	SubscriptionTerminated SubscriptionStatus = "terminated"
)

// Purchase is a row of purchases, with the status of its payment and
// subscription when it has them.
type Purchase struct {
	ID                 uuid.UUID
	Created            time.Time
	LastUpdated        time.Time
	Account            uuid.UUID
	StripeAccount      string
	Kind               Kind
	Fulfilled          bool
	FulfilledAt        *time.Time
	Customer           string
	PaymentIntent      string
	Invoice            string
	Subscription       string
	PaymentStatus      PaymentStatus      // "" without a payment row
	SubscriptionStatus SubscriptionStatus // "" without a subscription row
	LastEventID        string
	LastEventCreated   *time.Time
}

// Status is the purchase's state: "new" or "fulfilled".
func (p Purchase) Status() string {
	if p.Fulfilled {
		return "fulfilled"
	}
	return "new"
}

// Payment is a row of payments.
type Payment struct {
	ID               string
	Created          time.Time
	LastUpdated      time.Time
	Account          uuid.UUID
	StripeAccount    string
	Purchase         uuid.UUID
	Status           PaymentStatus
	LastEventID      string
	LastEventCreated *time.Time
}

// Subscription is a row of subscriptions.
type Subscription struct {
	ID               string
	Created          time.Time
	LastUpdated      time.Time
	Account          uuid.UUID
	StripeAccount    string
	Purchase         uuid.UUID
	Status           SubscriptionStatus
	LastEventID      string
	LastEventCreated *time.Time
}

// translate turns the database's refusals into domain errors.
func translate(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23514" && len(pgErr.ConstraintName) > len("_transition") &&
		pgErr.ConstraintName[len(pgErr.ConstraintName)-len("_transition"):] == "_transition" {
		return fmt.Errorf("%w: %s", ErrIllegalTransition, pgErr.Message)
	}
	return err
}
