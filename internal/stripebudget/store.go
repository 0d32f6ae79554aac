package stripebudget

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// LeaseRequest asks the store for request slots (stripe_budget_lease in
// sql/00029_stripe_budget.sql and sql/00034_stripe_budget_lead.sql says
// what each field does).
type LeaseRequest struct {
	Class     Class
	Want      int
	Interval  time.Duration // one request's worth: 1 / rate
	Ahead     time.Duration // how far past now an unopposed class may reserve
	Floor     time.Duration // an opposed class's slot every Floor (0: none)
	DemandTTL time.Duration // how long this lease marks the class as waiting
	Lead      time.Duration // no slot earlier than this after the store's now: the answer's way back
}

// Lease is the store's answer, in the store's clock.
type Lease struct {
	Granted int       // slots granted, First, First+Interval, …
	First   time.Time // the first slot
	Now     time.Time // the store's time when it decided
	NextTry time.Time // when to ask again for more
}

// Store keeps the shared schedule.
type Store interface {
	Lease(ctx context.Context, req LeaseRequest) (Lease, error)
	// Pause frees no slot before d from now: Stripe answered 429.
	Pause(ctx context.Context, d time.Duration) error
}

// PGStore is the schedule in Postgres: one stripe_budget row per name,
// changed by one function call per lease under the row's lock.
type PGStore struct {
	Pool *pgxpool.Pool
	Name string // the row; default "stripe"
}

func (s PGStore) name() string {
	if s.Name == "" {
		return "stripe"
	}
	return s.Name
}

// Lease implements Store.
func (s PGStore) Lease(ctx context.Context, req LeaseRequest) (Lease, error) {
	var l Lease
	err := s.Pool.QueryRow(ctx,
		`SELECT granted, first_slot, now_at, next_try FROM stripe_budget_lease($1, $2, $3, $4, $5, $6, $7, $8)`,
		s.name(), int(req.Class)+1, req.Want, req.Interval, req.Ahead, req.Floor, req.DemandTTL, req.Lead,
	).Scan(&l.Granted, &l.First, &l.Now, &l.NextTry)
	if err != nil {
		return Lease{}, fmt.Errorf("lease stripe budget: %w", err)
	}
	return l, nil
}

// Pause implements Store.
func (s PGStore) Pause(ctx context.Context, d time.Duration) error {
	_, err := s.Pool.Exec(ctx, `INSERT INTO stripe_budget (name, tat) VALUES ($1, clock_timestamp() + $2)
		ON CONFLICT (name) DO UPDATE SET tat = greatest(stripe_budget.tat, clock_timestamp() + $2)`, s.name(), d)
	if err != nil {
		return fmt.Errorf("pause stripe budget: %w", err)
	}
	return nil
}
