// Package outbox stores side effects in the transaction that causes them and
// delivers them afterwards, at least once, with backoff. Consumers make
// delivery idempotent with the message id, which never changes.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Message is one side effect.
type Message struct {
	ID    uuid.UUID
	Topic string
	Type  string
	// DedupeKey names the effect: a second Enqueue with the same key is a
	// no-op, so one effect yields one message however often it is caused.
	DedupeKey string
	Payload   json.RawMessage
	CreatedAt time.Time
	Attempts  int
}

// Enqueue adds msg inside tx. It reports whether a new message was added
// (false: the effect was already enqueued). ID and CreatedAt are filled in
// when zero.
func Enqueue(ctx context.Context, tx pgx.Tx, msg Message) (bool, error) {
	if msg.Topic == "" || msg.Type == "" || msg.DedupeKey == "" {
		return false, errors.New("enqueue: topic, type and dedupe key are required")
	}
	if msg.ID == uuid.Nil {
		msg.ID = uuid.New()
	}
	if msg.CreatedAt.IsZero() {
		msg.CreatedAt = time.Now().UTC()
	}
	if len(msg.Payload) == 0 {
		msg.Payload = json.RawMessage(`{}`)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO outbox (id, topic, type, dedupe_key, payload, created_at, available_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (dedupe_key) DO NOTHING`,
		msg.ID, msg.Topic, msg.Type, msg.DedupeKey, []byte(msg.Payload), msg.CreatedAt)
	if err != nil {
		return false, fmt.Errorf("enqueue %s %s: %w", msg.Topic, msg.Type, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Deliver hands one message to its consumer. An error schedules a retry.
type Deliver func(ctx context.Context, msg Message) error

// Worker delivers the messages of one topic.
type Worker struct {
	Pool    *pgxpool.Pool
	Topic   string
	Deliver Deliver
	Log     *slog.Logger
	// Batch is how many messages one poll claims (default 20).
	Batch int
	// Idle is the pause when nothing is due (default 500 ms).
	Idle time.Duration
	// Backoff gives the delay before attempt n+1 (default: exponential from
	// 1 s, capped at 10 min).
	Backoff func(attempt int) time.Duration
	// Now replaces time.Now in tests.
	Now func() time.Time
}

// DefaultBackoff doubles from one second up to ten minutes.
func DefaultBackoff(attempt int) time.Duration {
	d := time.Second << min(attempt, 10)
	return min(d, 10*time.Minute)
}

func (w *Worker) defaults() {
	if w.Batch == 0 {
		w.Batch = 20
	}
	if w.Idle == 0 {
		w.Idle = 500 * time.Millisecond
	}
	if w.Backoff == nil {
		w.Backoff = DefaultBackoff
	}
	if w.Now == nil {
		w.Now = time.Now
	}
	if w.Log == nil {
		w.Log = slog.Default()
	}
}

// Run delivers until ctx ends. A delivery in flight is finished first.
func (w *Worker) Run(ctx context.Context) error {
	w.defaults()
	for {
		n, err := w.DeliverDue(context.WithoutCancel(ctx))
		if err != nil {
			w.Log.Error("outbox poll failed", "topic", w.Topic, "error", err)
		}
		if n > 0 && err == nil {
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.Idle):
		}
	}
}

// DeliverDue claims up to Batch due messages and delivers them, one
// transaction per message so that a slow consumer holds one row lock only.
// It returns how many messages it attempted.
func (w *Worker) DeliverDue(ctx context.Context) (int, error) {
	w.defaults()
	attempted := 0
	for attempted < w.Batch {
		done, err := w.deliverOne(ctx)
		if err != nil {
			return attempted, err
		}
		if !done {
			return attempted, nil
		}
		attempted++
	}
	return attempted, nil
}

// deliverOne locks the oldest due message (SKIP LOCKED lets several workers
// share a topic), delivers it, and records the result.
func (w *Worker) deliverOne(ctx context.Context) (bool, error) {
	found := false
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var msg Message
		var payload []byte
		err := tx.QueryRow(ctx, `SELECT id, topic, type, dedupe_key, payload, created_at, attempts
			FROM outbox
			WHERE topic = $1 AND delivered_at IS NULL AND available_at <= $2
			ORDER BY available_at, created_at
			LIMIT 1
			FOR UPDATE SKIP LOCKED`, w.Topic, w.Now()).
			Scan(&msg.ID, &msg.Topic, &msg.Type, &msg.DedupeKey, &payload, &msg.CreatedAt, &msg.Attempts)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim outbox message: %w", err)
		}
		found = true
		msg.Payload = payload
		if derr := w.Deliver(ctx, msg); derr != nil {
			next := w.Now().Add(w.Backoff(msg.Attempts))
			w.Log.Warn("outbox delivery failed; will retry", "topic", w.Topic, "message_id", msg.ID,
				"type", msg.Type, "attempt", msg.Attempts+1, "retry_at", next, "error", derr)
			_, err = tx.Exec(ctx, `UPDATE outbox SET attempts = attempts + 1, last_error = $2, available_at = $3 WHERE id = $1`,
				msg.ID, truncate(derr.Error(), 1000), next)
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE outbox SET attempts = attempts + 1, last_error = NULL, delivered_at = $2 WHERE id = $1`,
			msg.ID, w.Now())
		return err
	})
	if err != nil {
		return false, fmt.Errorf("deliver %s message: %w", w.Topic, err)
	}
	return found, nil
}

// Pending counts undelivered messages of a topic (metrics, tests).
func Pending(ctx context.Context, pool *pgxpool.Pool, topic string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = $1 AND delivered_at IS NULL`, topic).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count pending %s: %w", topic, err)
	}
	return n, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
