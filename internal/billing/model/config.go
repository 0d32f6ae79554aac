package model

import (
	"errors"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/config"
)

// Config of the billing core (docs/configuration.md).
type Config struct {
	// Shards is BILLING_SHARDS: GSI write shards per date. Only ever
	// increase it: entries written under a larger count are not found by
	// a smaller one until they are rewritten.
	Shards int
	// WorkersPerShard is BILLING_WORKERS: concurrent accounts per shard.
	WorkersPerShard int
	// ReminderDays is BILLING_REMINDER_DAYS: reminders go out this many days
	// before a payment.
	ReminderDays int
	// Retry is BILLING_RETRY_DAYS and BILLING_STALE_DAYS.
	Retry dates.RetryPolicy
	// HardDeclineCodes is BILLING_HARD_DECLINE_CODES: a period declined
	// with one of these Stripe codes is not retried (decline.go).
	HardDeclineCodes []string
	// ReceiptTTL is BILLING_RECEIPT_TTL: how long receipts are kept.
	ReceiptTTL time.Duration
	// LookbackDays is BILLING_LOOKBACK_DAYS: a job for date D also reads the
	// index partitions of the days before, so a day the job did not run is
	// caught up (what is there was not processed; what was is gone from it).
	LookbackDays int
	// IdempotencyWindow is how long a Stripe idempotency key may be reused:
	// Stripe may prune keys once they are 24 h old. Within it, a rerun
	// resends an attempt in flight with its key; past it a resend could
	// charge twice, so the job asks Stripe for the attempt's PaymentIntent
	// (search by metadata, list by customer), records what happened, and
	// only then makes a new attempt (internal/billing/collect/resolve.go).
	IdempotencyWindow time.Duration
	// PlatformAccount is STRIPE_PLATFORM_ACCOUNT: the platform's own account
	// id, the same as "" (no Stripe-Account) to the webhook feed's checks.
	PlatformAccount string
	// MaxPauseMonths bounds a pause.
	MaxPauseMonths int
	// LockedRetryWait: when a job found accounts locked, it tries them
	// again once after this long (0: never). A lease is enough to take over
	// the lock of a crashed holder.
	LockedRetryWait time.Duration
	// Livemode: STRIPE_API_KEY is a live key. Test clocks are refused.
	Livemode bool
	// TriggerMinGap is BILLING_TRIGGER_MIN_GAP: a period gets at most one
	// attempt triggered by the platform per this long (collect/triggered.go).
	TriggerMinGap time.Duration
}

// DefaultConfig is the configuration of docs/design.md §8. What a
// BILLING_* variable sets defaults to package config's value, the one
// source; the rest is billing's own.
func DefaultConfig() Config {
	return Config{
		Shards:            config.DefaultBillingShards,
		WorkersPerShard:   config.DefaultBillingWorkers,
		ReminderDays:      config.DefaultBillingReminderDays,
		Retry:             dates.RetryPolicy{Days: config.DefaultBillingRetryDays(), StaleDays: config.DefaultBillingStaleDays},
		HardDeclineCodes:  config.DefaultBillingHardDeclineCodes(),
		ReceiptTTL:        config.DefaultBillingReceiptTTL,
		LookbackDays:      config.DefaultBillingLookbackDays,
		IdempotencyWindow: 23 * time.Hour,
		MaxPauseMonths:    24,
		// A lease and a heartbeat: long enough to take over a crashed
		// holder's lock (app sets it from BILLING_LOCK_*).
		LockedRetryWait: config.DefaultBillingLockLease + config.DefaultBillingLockHeartbeat,
		TriggerMinGap:   config.DefaultBillingTriggerMinGap,
	}
}

// ErrCrash, in the error of a collaborator, means the process is dying
// there (the crash tests inject it: billingtest.Crasher decorates the store
// and the charger): the job stops at once and the account's lock is
// abandoned, not released, as a dead process leaves it; the next holder
// takes it over after the lease.
var ErrCrash = errors.New("injected crash")

// LockKey is the key of an account's billing lock (docs/design.md §8). The lock
// package is generic; the key format is billing's.
func LockKey(accountID string) string { return "subscription-billing:user_id:" + accountID }
