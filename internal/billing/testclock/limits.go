package testclock

import (
	"context"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// Test clocks share the process, the tables and the Stripe rate limit with
// real billing, so they are bounded: at most
// Config.MaxClocks clocks exist (TEST_CLOCKS_MAX), at most
// Config.MaxAdvancing advances run on one instance at once, and a clock's
// time stays below the same absolute ceiling at an advance as at its
// creation (the year 2100), so repeated 3-year steps cannot run it on.

// DefaultMaxAdvancing is how many test clocks one instance advances at once.
const DefaultMaxAdvancing = 2

// clockCeiling is the first instant a test clock may not reach.
var clockCeiling = time.Date(2101, 1, 1, 0, 0, 0, 0, time.UTC)

var (
	// ErrTooManyClocks: TEST_CLOCKS_MAX clocks exist already.
	ErrTooManyClocks = apperr.New(apperr.CodeConflict, "too many test clocks")
	// ErrTooManyAdvances: this instance advances MaxAdvancing clocks already.
	ErrTooManyAdvances = apperr.New(apperr.CodeConflict, "too many test clocks advancing")
)

// checkClockCeiling refuses a frozen time at or past the ceiling.
func checkClockCeiling(t time.Time) error {
	if !t.Before(clockCeiling) {
		return apperr.Invalid("frozen_time: a time between the years 2000 and 2100")
	}
	return nil
}

// checkClockCount refuses a new clock once MaxClocks exist.
func (s *Service) checkClockCount(ctx context.Context) error {
	ids, err := s.store.ListClockIDs(ctx)
	if err != nil {
		return err
	}
	if len(ids) >= s.cfg.MaxClocks {
		return apperr.Wrap(ErrTooManyClocks, apperr.CodeConflict, "too many test clocks: %d exist, at most %d (TEST_CLOCKS_MAX); delete one first", len(ids), s.cfg.MaxClocks)
	}
	return nil
}

// takeAdvanceSlot takes one of this instance's advance slots, or fails at
// once when all are taken; release gives it back.
func (s *Service) takeAdvanceSlot() (release func(), err error) {
	select {
	case s.advancing <- struct{}{}:
		return func() { <-s.advancing }, nil
	default:
		return nil, apperr.Wrap(ErrTooManyAdvances, apperr.CodeConflict, "too many test clocks advancing: %d on this instance already; try again once one is ready", cap(s.advancing))
	}
}
