package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// LimitsConfig bounds the service's use of its dependencies (docs/configuration.md,
// docs/design.md §6: the webhook answers 200 only when durable, and
// 5xx within a deadline when a dependency fails).
type LimitsConfig struct {
	DatabaseMaxConns         int           // DATABASE_MAX_CONNS
	DatabaseConnectTimeout   time.Duration // DATABASE_CONNECT_TIMEOUT
	DatabaseStatementTimeout time.Duration // DATABASE_STATEMENT_TIMEOUT
	DatabaseTCPUserTimeout   time.Duration // DATABASE_TCP_USER_TIMEOUT
	DynamoTimeout            time.Duration // DYNAMODB_TIMEOUT, per attempt
	IngestTimeout            time.Duration // INGEST_TIMEOUT, per delivery
	IngestBatchTimeout       time.Duration // INGEST_BATCH_TIMEOUT
	IngestQueueMax           int           // INGEST_QUEUE_MAX
	IngestQueueMaxBytes      int64         // INGEST_QUEUE_MAX_BYTES
}

// loadLimits reads the limits. DATABASE_MAX_CONNS has no minimum tied to
// INGEST_FLUSHERS: a small pool only makes deliveries wait (each within its
// deadline); docs/configuration.md explains the default.
func loadLimits(get func(key, def string) string) (LimitsConfig, error) {
	var errs []error
	atoi := func(key, def string, lo, hi int) int {
		n, err := strconv.Atoi(get(key, def))
		if err != nil || n < lo || n > hi {
			errs = append(errs, fmt.Errorf("%s: an integer from %d to %d", key, lo, hi))
		}
		return n
	}
	dur := func(key, def string) time.Duration {
		d, err := time.ParseDuration(get(key, def))
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s: a positive duration such as %s", key, def))
		}
		return d
	}
	l := LimitsConfig{
		DatabaseMaxConns:         atoi("DATABASE_MAX_CONNS", "16", 1, 1000),
		DatabaseConnectTimeout:   dur("DATABASE_CONNECT_TIMEOUT", "5s"),
		DatabaseStatementTimeout: dur("DATABASE_STATEMENT_TIMEOUT", "30s"),
		DatabaseTCPUserTimeout:   dur("DATABASE_TCP_USER_TIMEOUT", "15s"),
		DynamoTimeout:            dur("DYNAMODB_TIMEOUT", "3s"),
		IngestTimeout:            dur("INGEST_TIMEOUT", DefaultIngestTimeout.String()),
		IngestBatchTimeout:       dur("INGEST_BATCH_TIMEOUT", DefaultIngestBatchTimeout.String()),
		IngestQueueMax:           atoi("INGEST_QUEUE_MAX", strconv.Itoa(DefaultIngestQueueMax), 1, 1_000_000),
		IngestQueueMaxBytes:      int64(atoi("INGEST_QUEUE_MAX_BYTES", strconv.Itoa(DefaultIngestQueueMaxBytes), 1<<20, 1<<30)),
	}
	if l.IngestBatchTimeout > 0 && l.IngestTimeout > 0 && l.IngestBatchTimeout >= l.IngestTimeout {
		errs = append(errs, errors.New("INGEST_BATCH_TIMEOUT: below INGEST_TIMEOUT, so a failed batch is answered before the delivery's deadline"))
	}
	return l, errors.Join(errs...)
}

// LogValue renders the limits (no secrets among them).
func (l LimitsConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("database_max_conns", l.DatabaseMaxConns),
		slog.Duration("database_connect_timeout", l.DatabaseConnectTimeout),
		slog.Duration("database_statement_timeout", l.DatabaseStatementTimeout),
		slog.Duration("database_tcp_user_timeout", l.DatabaseTCPUserTimeout),
		slog.Duration("dynamodb_timeout", l.DynamoTimeout),
		slog.Duration("ingest_timeout", l.IngestTimeout),
		slog.Duration("ingest_batch_timeout", l.IngestBatchTimeout),
		slog.Int("ingest_queue_max", l.IngestQueueMax),
		slog.Int64("ingest_queue_max_bytes", l.IngestQueueMaxBytes),
	)
}
