package config

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Retention defaults (docs/retention.md).
const (
	DefaultDeadLetterRetention = 90 * 24 * time.Hour // 2160h
	DefaultOpsRetention        = 90 * 24 * time.Hour // 2160h
)

// RetentionConfig is how long the rows kept for operators are kept; the
// pruner (PRUNE_EVERY) deletes them after it (package retention).
type RetentionConfig struct {
	DeadLetters time.Duration // DEAD_LETTER_RETENTION: outbox dead letters and quarantined event records, from when they died
	Ops         time.Duration // OPS_RETENTION: the console's ops_* rows (failed events, billing runs, hourly counts), finished replays, incident audit rows
}

func loadRetention(get func(key, def string) string) (RetentionConfig, error) {
	var errs []error
	dur := func(key string, def, lo time.Duration) time.Duration {
		d, err := time.ParseDuration(get(key, shortDuration(def)))
		if err != nil || d < lo || d > 10*365*24*time.Hour {
			errs = append(errs, fmt.Errorf("%s: a duration from %s to 87600h (10 years)", key, lo))
		}
		return d
	}
	r := RetentionConfig{
		DeadLetters: dur("DEAD_LETTER_RETENTION", DefaultDeadLetterRetention, 24*time.Hour),
		// The console's chart shows 48 hours.
		Ops: dur("OPS_RETENTION", DefaultOpsRetention, 48*time.Hour),
	}
	return r, errors.Join(errs...)
}

// LogValue renders the retention settings.
func (r RetentionConfig) LogValue() slog.Value {
	return slog.GroupValue(slog.Duration("dead_letters", r.DeadLetters), slog.Duration("ops", r.Ops))
}
