// Package outbox stores side effects in the transaction that causes them and
// delivers them afterwards, at least once, with backoff. Consumers make
// delivery idempotent with the message id, which never changes.
//
// Delivery holds no database connection: a worker claims a batch of due
// messages with a lease in one short statement, calls the consumer with no
// connection or row lock held, then records the result in another short
// statement. While a lease is valid no other worker (in this process or
// another replica) claims the row; a lease that expires (a crashed worker) is
// taken over. A message that keeps failing becomes a dead letter, listed and
// re-driven through Store.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/pgtx"
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
	// Attempts is how many deliveries were started before this one.
	Attempts int
}

// Enqueue adds msg inside tx. It reports whether a new message was added
// (false: the effect was already enqueued). ID and CreatedAt are filled in
// when zero.
func Enqueue(ctx context.Context, tx pgtx.Tx, msg Message) (bool, error) {
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

// Deliver hands one message to its consumer. An error schedules a retry. ctx
// ends before the message's lease does: a consumer must return when it ends.
type Deliver func(ctx context.Context, msg Message) error

// Defaults of a Worker.
const (
	DefaultBatch = 10
	DefaultLease = 30 * time.Second
	DefaultIdle  = 500 * time.Millisecond
	// statementTimeout bounds each claim and bookkeeping statement, so a
	// black-holed Postgres cannot hang a worker for good.
	statementTimeout = 10 * time.Second
)

// Worker delivers the messages of one topic. Several workers, in one process
// or in several replicas, may serve the same topic.
type Worker struct {
	Pool    *pgxpool.Pool
	Topic   string
	Deliver Deliver
	Log     *slog.Logger
	// Batch is how many messages one claim takes (default 10). They are
	// delivered one after the other under one lease.
	Batch int
	// Lease is how long a claim keeps other workers off its messages
	// (default 30 s). A delivery is cancelled at three quarters of it, and a
	// message not started by half of it is handed back, so a slow consumer
	// never outlives its lease.
	Lease time.Duration
	// Idle is the pause when nothing is due (default 500 ms).
	Idle time.Duration
	// Backoff gives the delay before attempt n+1 (default: exponential from
	// 1 s, capped at 10 min).
	Backoff func(attempt int) time.Duration
	// MaxAttempts: a message whose delivery failed this many times is dead
	// (0: no limit).
	MaxAttempts int
	// MaxAge: a message whose delivery fails once it is this old (counted
	// from its creation or its last re-drive) is dead (0: no limit).
	MaxAge time.Duration
	// Owner names this worker in lease_owner (default host:pid).
	Owner string
	// OnDead is called for each message that became a dead letter
	// (metrics); may be nil.
	OnDead func(topic string)
	// Now replaces time.Now in tests. Leases and due times are in this
	// clock; every replica's clock is assumed within a few seconds of the
	// others (the quarter of a lease that is never used covers it).
	Now func() time.Time
}

// Policy is what the configuration decides for every worker: the lease and
// the dead-letter limits, and the hook that counts dead letters.
type Policy struct {
	Lease       time.Duration
	MaxAttempts int
	MaxAge      time.Duration
	OnDead      func(topic string)
}

// Apply sets p on w.
func (p Policy) Apply(w *Worker) {
	w.Lease, w.MaxAttempts, w.MaxAge, w.OnDead = p.Lease, p.MaxAttempts, p.MaxAge, p.OnDead
}

// DefaultBackoff doubles from one second up to ten minutes.
func DefaultBackoff(attempt int) time.Duration {
	d := time.Second << min(attempt, 10)
	return min(d, 10*time.Minute)
}

func (w *Worker) defaults() {
	if w.Batch <= 0 {
		w.Batch = DefaultBatch
	}
	if w.Lease <= 0 {
		w.Lease = DefaultLease
	}
	if w.Idle <= 0 {
		w.Idle = DefaultIdle
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
	if w.Owner == "" {
		host, _ := os.Hostname()
		w.Owner = host + ":" + strconv.Itoa(os.Getpid())
	}
}

// Run delivers until ctx ends. The delivery in flight is finished first
// (bounded by the lease); claimed messages not yet started are handed back.
func (w *Worker) Run(ctx context.Context) error {
	w.defaults()
	for {
		n, err := w.DeliverDue(ctx)
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

// claimed is one message under this worker's lease.
type claimed struct {
	Message
	availableAt  time.Time
	since        time.Time // created_at, or the last re-drive
	leaseExpired bool      // the previous attempt's lease ran out with no result
}

// DeliverDue claims up to Batch due messages, delivers them with no database
// connection held, and records each result. It returns how many messages it
// attempted. Once ctx ends no further delivery starts (the rest are handed
// back); the one in flight and the bookkeeping run to completion.
func (w *Worker) DeliverDue(parent context.Context) (int, error) {
	w.defaults()
	if parent.Err() != nil {
		return 0, nil
	}
	ctx := context.WithoutCancel(parent)
	token := w.Owner + "/" + uuid.NewString()
	start := time.Now() // real time: context deadlines are in it
	msgs, err := w.claim(ctx, token)
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	stopStarting := start.Add(w.Lease / 2)
	deadline := start.Add(w.Lease * 3 / 4)
	attempted := 0
	for i, m := range msgs {
		if parent.Err() != nil || time.Now().After(stopStarting) {
			return attempted, w.release(ctx, token, msgs[i:])
		}
		attempted++
		if err := w.deliver(ctx, token, m, deadline); err != nil {
			// Postgres failed: hand the rest back rather than leave them
			// leased (best effort; their lease expires anyway).
			_ = w.release(ctx, token, msgs[i+1:])
			return attempted, err
		}
	}
	return attempted, nil
}

// deliver runs one claimed message and records its result.
func (w *Worker) deliver(ctx context.Context, token string, m claimed, deadline time.Time) error {
	if w.spent(m) {
		// The last lease ended with no result (a crash or a hang) and the
		// limits are reached: do not try a poison message again.
		return w.fail(ctx, token, m, errors.New("lease expired without a result"), true)
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	derr := w.call(dctx, m.Message)
	cancel()
	if derr == nil {
		return w.succeed(ctx, m)
	}
	dead := (w.MaxAttempts > 0 && m.Attempts+1 >= w.MaxAttempts) || (w.MaxAge > 0 && w.Now().Sub(m.since) >= w.MaxAge)
	return w.fail(ctx, token, m, derr, dead)
}

// call runs the consumer; a panic is a failed attempt (logged with its
// stack), not the end of the worker, so a poison message reaches its limits
// and becomes a dead letter instead of crashing every replica in turn.
func (w *Worker) call(ctx context.Context, m Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			w.Log.Error("outbox consumer panicked", "topic", w.Topic, "message_id", m.ID, "panic", fmt.Sprint(r),
				"stack", string(debug.Stack()))
			err = fmt.Errorf("consumer panicked: %v", r)
		}
	}()
	return w.Deliver(ctx, m)
}

// spent reports whether m is past its limits before this attempt: its
// attempts are used up (a crash loop, or a lowered limit), or it is too old
// and its last attempt ended with an expired lease.
func (w *Worker) spent(m claimed) bool {
	if w.MaxAttempts > 0 && m.Attempts >= w.MaxAttempts {
		return true
	}
	return m.leaseExpired && w.MaxAge > 0 && w.Now().Sub(m.since) >= w.MaxAge
}

// claim leases up to Batch due messages in one statement (and so one short
// implicit transaction). SKIP LOCKED lets concurrent claims pass each other;
// moving available_at to the lease end takes the rows out of the due range
// until the lease expires, when any worker may take them over. The attempt
// is counted here, so a worker that dies mid-delivery still uses one up.
func (w *Worker) claim(ctx context.Context, token string) ([]claimed, error) {
	now := w.Now()
	until := now.Add(w.Lease)
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	rows, err := w.Pool.Query(ctx, `UPDATE outbox o
		SET leased_until = $3, lease_owner = $4, available_at = $3, attempts = o.attempts + 1
		FROM (SELECT id, available_at, lease_owner IS NOT NULL AS expired FROM outbox
			WHERE topic = $1 AND delivered_at IS NULL AND dead_at IS NULL AND available_at <= $2
			ORDER BY available_at, created_at
			LIMIT $5
			FOR UPDATE SKIP LOCKED) due
		WHERE o.id = due.id
		RETURNING o.id, o.topic, o.type, o.dedupe_key, o.payload, o.created_at, o.attempts - 1,
			due.available_at, coalesce(o.redriven_at, o.created_at), due.expired`,
		w.Topic, now, until, token, w.Batch)
	if err != nil {
		return nil, fmt.Errorf("claim %s messages: %w", w.Topic, err)
	}
	msgs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
		var c claimed
		var payload []byte
		err := row.Scan(&c.ID, &c.Topic, &c.Type, &c.DedupeKey, &payload, &c.CreatedAt, &c.Attempts, &c.availableAt, &c.since, &c.leaseExpired)
		c.Payload = payload
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s messages: %w", w.Topic, err)
	}
	sort.Slice(msgs, func(i, j int) bool {
		if !msgs[i].availableAt.Equal(msgs[j].availableAt) {
			return msgs[i].availableAt.Before(msgs[j].availableAt)
		}
		return msgs[i].CreatedAt.Before(msgs[j].CreatedAt)
	})
	return msgs, nil
}

// succeed marks m delivered. It does not check the lease: the effect is out,
// and sending it again would only add a duplicate.
func (w *Worker) succeed(ctx context.Context, m claimed) error {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	_, err := w.Pool.Exec(ctx, `UPDATE outbox
		SET delivered_at = $2, last_error = NULL, leased_until = NULL, lease_owner = NULL, dead_at = NULL
		WHERE id = $1 AND delivered_at IS NULL`, m.ID, w.Now())
	if err != nil {
		return fmt.Errorf("mark %s message %s delivered: %w", w.Topic, m.ID, err)
	}
	return nil
}

// fail records a failed attempt: a retry after the backoff, or a dead
// letter. Only the lease holder writes, so a worker that lost its lease
// cannot overwrite the state its successor left.
func (w *Worker) fail(ctx context.Context, token string, m claimed, derr error, dead bool) error {
	now := w.Now()
	next := now.Add(w.Backoff(m.Attempts))
	var deadAt *time.Time
	if dead {
		deadAt = &now
	}
	sctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	tag, err := w.Pool.Exec(sctx, `UPDATE outbox
		SET last_error = $3, available_at = $4, dead_at = $5, leased_until = NULL, lease_owner = NULL
		WHERE id = $1 AND lease_owner = $2 AND delivered_at IS NULL`,
		m.ID, token, truncate(derr.Error(), 1000), next, deadAt)
	if err != nil {
		return fmt.Errorf("record failed %s message %s: %w", w.Topic, m.ID, err)
	}
	if tag.RowsAffected() == 0 {
		w.Log.Warn("outbox lease lost before the result was recorded", "topic", w.Topic, "message_id", m.ID)
		return nil
	}
	attrs := []any{"topic", w.Topic, "message_id", m.ID, "type", m.Type, "attempt", m.Attempts + 1, "error", derr}
	if !dead {
		w.Log.Warn("outbox delivery failed; will retry", append(attrs, "retry_at", next)...)
		return nil
	}
	// The payload is never logged: it may carry an email address or a
	// receiver's data. The id is enough to list and re-drive it.
	w.Log.Error("outbox message dead-lettered: delivery given up; re-drive it once the receiver is fixed",
		append(attrs, "age", now.Sub(m.since).Round(time.Second).String(),
			"max_attempts", w.MaxAttempts, "max_age", w.MaxAge.String())...)
	if w.OnDead != nil {
		w.OnDead(w.Topic)
	}
	return nil
}

// release hands back claimed messages that were not started, due at once,
// with their attempt not counted.
func (w *Worker) release(ctx context.Context, token string, msgs []claimed) error {
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	_, err := w.Pool.Exec(ctx, `UPDATE outbox
		SET available_at = $3, leased_until = NULL, lease_owner = NULL, attempts = attempts - 1
		WHERE id = ANY($1) AND lease_owner = $2 AND delivered_at IS NULL`, ids, token, w.Now())
	if err != nil {
		return fmt.Errorf("release %s messages: %w", w.Topic, err)
	}
	return nil
}

// Pending counts undelivered, live messages of a topic (metrics, tests).
func Pending(ctx context.Context, pool *pgxpool.Pool, topic string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = $1 AND delivered_at IS NULL AND dead_at IS NULL`, topic).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count pending %s: %w", topic, err)
	}
	return n, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary: Postgres refuses invalid UTF-8.
	return strings.ToValidUTF8(s[:n], "")
}
