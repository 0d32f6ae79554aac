package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// StripeEventRetention is how long Stripe's Events API keeps an event: the
// poller and the replay API can fetch, and so re-drive, an event only this
// long after its creation.
const StripeEventRetention = 30 * 24 * time.Hour

// OutboxConfig is the outbox's and the pruner's part of the configuration
// (docs/tracking.md "Outbox").
type OutboxConfig struct {
	MaxAttempts     int           // OUTBOX_MAX_ATTEMPTS: failed deliveries before a message is dead; 0 = no limit
	MaxAge          time.Duration // OUTBOX_MAX_AGE: a failure after this age makes a message dead; 0 = no limit
	Lease           time.Duration // OUTBOX_LEASE: how long a claim keeps other workers off a message
	Retention       time.Duration // OUTBOX_RETENTION: delivered messages are deleted after it
	LedgerRetention time.Duration // LEDGER_RETENTION: processed_events rows are deleted after it
	PruneEvery      time.Duration // PRUNE_EVERY: the pruner's period in serve; 0 = off
}

// loadOutbox reads the OUTBOX_* variables, LEDGER_RETENTION and PRUNE_EVERY
// and checks them against the settings they depend on.
func loadOutbox(get func(key, def string) string, eventTTL time.Duration, lookbackDays int) (OutboxConfig, error) {
	var errs []error
	dur := func(key, def string, lo, hi time.Duration, allowZero bool) time.Duration {
		d, err := time.ParseDuration(get(key, def))
		if err != nil || (d == 0 && !allowZero) || (d != 0 && (d < lo || d > hi)) {
			zero := ""
			if allowZero {
				zero = " (0 turns it off)"
			}
			errs = append(errs, fmt.Errorf("%s: a duration from %s to %s%s", key, lo, hi, zero))
		}
		return d
	}
	o := OutboxConfig{
		MaxAge:          dur("OUTBOX_MAX_AGE", "72h", time.Minute, 365*24*time.Hour, true),
		Lease:           dur("OUTBOX_LEASE", "30s", 15*time.Second, time.Hour, false),
		Retention:       dur("OUTBOX_RETENTION", "720h", 24*time.Hour, 10*365*24*time.Hour, false),
		LedgerRetention: dur("LEDGER_RETENTION", "2160h", 24*time.Hour, 10*365*24*time.Hour, false),
		PruneEvery:      dur("PRUNE_EVERY", "1h", time.Minute, 7*24*time.Hour, true),
	}
	n, err := strconv.Atoi(get("OUTBOX_MAX_ATTEMPTS", "500"))
	if err != nil || n < 0 || n > 100000 {
		errs = append(errs, errors.New("OUTBOX_MAX_ATTEMPTS: an integer from 0 (no limit) to 100000"))
	}
	o.MaxAttempts = n
	// The ledger is what makes a redelivery or a poller replay apply once.
	// An event can come back only while Stripe keeps it (the Events API, 30
	// days after creation: Stripe's own retries end after 3 days, the poller
	// and the replay API fetch from it) or while our events table holds its
	// payload (EVENT_TTL after creation, for a replay from the table). Rows
	// are pruned by processed_at, which is never before the event's creation,
	// so a retention longer than the sum keeps every row that could still be
	// needed.
	if bound := eventTTL + StripeEventRetention; eventTTL > 0 && o.LedgerRetention <= bound {
		errs = append(errs, fmt.Errorf("LEDGER_RETENTION: must be longer than EVENT_TTL + 30 days (%s): a pruned ledger row would let a redelivered or replayed event apply twice", bound))
	}
	// A delivered message's dedupe key keeps a billing job that re-runs a
	// past date (BILLING_LOOKBACK_DAYS) from enqueueing its action again.
	if bound := time.Duration(lookbackDays+1) * 24 * time.Hour; o.Retention <= bound {
		errs = append(errs, fmt.Errorf("OUTBOX_RETENTION: must be longer than BILLING_LOOKBACK_DAYS + 1 day (%s)", bound))
	}
	return o, errors.Join(errs...)
}

// LogValue renders the outbox settings (no secrets among them).
func (o OutboxConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("max_attempts", o.MaxAttempts), slog.Duration("max_age", o.MaxAge),
		slog.Duration("lease", o.Lease), slog.Duration("retention", o.Retention),
		slog.Duration("ledger_retention", o.LedgerRetention), slog.Duration("prune_every", o.PruneEvery),
	)
}
