package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/failcause"
)

// Store is the operator's view of the outbox: dead letters, their re-drive,
// backlog figures, and the pruning of delivered messages. The internal API
// and the operator console call it.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	now  func() time.Time
}

// NewStore returns a store over pool; now may be nil (time.Now).
func NewStore(pool *pgxpool.Pool, log *slog.Logger, now func() time.Time) *Store {
	if log == nil {
		log = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	return &Store{pool: pool, log: log, now: now}
}

// DeadLetter is a message the workers gave up on. The payload is left out:
// it may hold personal data, and the id is what a re-drive needs.
type DeadLetter struct {
	ID        uuid.UUID
	Topic     string
	Type      string
	DedupeKey string
	Attempts  int
	Redrives  int
	CreatedAt time.Time
	DeadAt    time.Time
	LastError string
}

// DeadCursor is the position after the last dead letter of a page (zero:
// the first page). Pages run newest dead first.
type DeadCursor struct {
	DeadAt time.Time
	ID     uuid.UUID
}

// Undelivered is an undelivered message that is not a dead letter.
type Undelivered struct {
	ID          uuid.UUID
	Topic       string
	Type        string
	Attempts    int
	LastError   string
	CreatedAt   time.Time
	AvailableAt time.Time
}

// PendingCursor is the position after the last message of a page (zero:
// the first page). Pages run oldest due first; (available_at, id) orders
// ties, so none is skipped or repeated.
type PendingCursor struct {
	AvailableAt time.Time
	ID          uuid.UUID
}

// ListPending returns up to limit undelivered messages after cursor, of one
// topic or (topic "") of all, oldest due first, and the cursor of the next
// page (nil on the last page): the console's outbox page.
func (s *Store) ListPending(ctx context.Context, topic string, after PendingCursor, limit int) ([]Undelivered, *PendingCursor, error) {
	if limit <= 0 {
		return nil, nil, errors.New("list pending messages: limit must be positive")
	}
	first := after.AvailableAt.IsZero()
	rows, err := s.pool.Query(ctx, `SELECT id, topic, type, attempts, coalesce(last_error, ''), created_at, available_at
		FROM outbox WHERE delivered_at IS NULL AND dead_at IS NULL AND ($1 = '' OR topic = $1)
		AND ($2 OR (available_at, id) > ($3, $4))
		ORDER BY available_at, id LIMIT $5`, topic, first, after.AvailableAt, after.ID, limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list pending messages: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Undelivered, error) {
		var m Undelivered
		err := row.Scan(&m.ID, &m.Topic, &m.Type, &m.Attempts, &m.LastError, &m.CreatedAt, &m.AvailableAt)
		return m, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list pending messages: %w", err)
	}
	if len(out) <= limit {
		return out, nil, nil
	}
	out = out[:limit]
	last := out[limit-1]
	return out, &PendingCursor{AvailableAt: last.AvailableAt, ID: last.ID}, nil
}

// ListDead returns up to limit dead letters after cursor, of one topic or
// (topic "") of all, newest first, and the cursor of the next page (nil on
// the last page).
func (s *Store) ListDead(ctx context.Context, topic string, after DeadCursor, limit int) ([]DeadLetter, *DeadCursor, error) {
	if limit <= 0 {
		return nil, nil, errors.New("list dead letters: limit must be positive")
	}
	first := after.DeadAt.IsZero()
	rows, err := s.pool.Query(ctx, `SELECT id, topic, type, dedupe_key, attempts, redrives, created_at, dead_at, coalesce(last_error, '')
		FROM outbox
		WHERE dead_at IS NOT NULL AND ($1 = '' OR topic = $1) AND ($2 OR (dead_at, id) < ($3, $4))
		ORDER BY dead_at DESC, id DESC
		LIMIT $5`, topic, first, after.DeadAt, after.ID, limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		err := row.Scan(&d.ID, &d.Topic, &d.Type, &d.DedupeKey, &d.Attempts, &d.Redrives, &d.CreatedAt, &d.DeadAt, &d.LastError)
		return d, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list dead letters: %w", err)
	}
	if len(out) <= limit {
		return out, nil, nil
	}
	out = out[:limit]
	last := out[limit-1]
	return out, &DeadCursor{DeadAt: last.DeadAt, ID: last.ID}, nil
}

// Redrive makes the dead letter id due again now, with its attempts and
// age limit starting afresh; the message keeps its id, so the receiver still
// deduplicates it. When there is nothing to do: apperr.ErrNotFound (no
// message has this id) or apperr.ErrConflict (the message is pending or
// delivered, not a dead letter; Redrive's one conflict).
func (s *Store) Redrive(ctx context.Context, id uuid.UUID) error {
	ids, err := s.redrive(ctx, `id = $2`, id)
	if err != nil {
		return err
	}
	if len(ids) == 1 {
		return nil
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox WHERE id = $1)`, id).Scan(&exists); err != nil {
		return fmt.Errorf("redrive %s: %w", id, err)
	}
	if !exists {
		return apperr.New(apperr.CodeNotFound, "outbox message %s not found", id)
	}
	return apperr.New(apperr.CodeConflict, "outbox message %s is not a dead letter (pending or delivered)", id)
}

// RedriveMany re-drives those of ids that are dead letters and returns them;
// the others (unknown, pending, delivered) are left alone.
func (s *Store) RedriveMany(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error) {
	return s.redrive(ctx, `id = ANY($2)`, ids)
}

// RedriveTopic re-drives every dead letter of topic and returns them.
func (s *Store) RedriveTopic(ctx context.Context, topic string) ([]uuid.UUID, error) {
	if topic == "" {
		return nil, errors.New("redrive: topic is required")
	}
	return s.redrive(ctx, `topic = $2`, topic)
}

func (s *Store) redrive(ctx context.Context, where string, arg any) ([]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, `UPDATE outbox
		SET dead_at = NULL, attempts = 0, available_at = $1, redriven_at = $1, redrives = redrives + 1,
			leased_until = NULL, lease_owner = NULL
		WHERE dead_at IS NOT NULL AND `+where+`
		RETURNING id`, s.now(), arg)
	if err != nil {
		return nil, fmt.Errorf("redrive dead letters: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("redrive dead letters: %w", err)
	}
	for _, id := range ids {
		s.log.Info("outbox dead letter re-driven", "message_id", id)
	}
	return ids, nil
}

// TopicStats are the figures of one topic.
type TopicStats struct {
	Topic string
	// Pending counts undelivered, live messages (due, backing off, or
	// under lease).
	Pending int
	// OldestPending is the age of the oldest of them (0 when none).
	OldestPending time.Duration
	// Dead counts dead letters.
	Dead int
}

// Stats returns the figures of every topic that has pending messages or
// dead letters, sorted by topic. Both queries read partial indexes that hold
// only those rows.
func (s *Store) Stats(ctx context.Context) ([]TopicStats, error) {
	rows, err := s.pool.Query(ctx, `SELECT topic, sum(pending)::int, min(oldest), sum(dead)::int FROM (
			SELECT topic, count(*) AS pending, min(created_at) AS oldest, 0 AS dead
			FROM outbox WHERE delivered_at IS NULL AND dead_at IS NULL GROUP BY topic
			UNION ALL
			SELECT topic, 0, NULL, count(*) FROM outbox WHERE dead_at IS NOT NULL GROUP BY topic
		) t GROUP BY topic ORDER BY topic`)
	if err != nil {
		return nil, fmt.Errorf("outbox stats: %w", err)
	}
	now := s.now()
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TopicStats, error) {
		var st TopicStats
		var oldest *time.Time
		if err := row.Scan(&st.Topic, &st.Pending, &oldest, &st.Dead); err != nil {
			return st, err
		}
		if oldest != nil {
			st.OldestPending = max(0, now.Sub(*oldest))
		}
		return st, nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox stats: %w", err)
	}
	return out, nil
}

// PruneDelivered deletes messages delivered before now - retention, batch
// rows per statement so no statement holds many locks or runs long, and
// returns how many it deleted. Pending messages and dead letters are kept.
func (s *Store) PruneDelivered(ctx context.Context, retention time.Duration, batch int) (int64, error) {
	if retention <= 0 || batch <= 0 {
		return 0, errors.New("prune outbox: retention and batch must be positive")
	}
	cutoff := s.now().Add(-retention)
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox WHERE delivered_at IS NOT NULL AND delivered_at < $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("prune outbox: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}

// DeleteDeadBefore deletes up to limit dead letters that died before
// before (never a delivered or pending message) and answers how many: the
// retention of dead letters (package retention), since a reminder email's
// carries its recipient. Rows another replica is deleting are skipped.
func DeleteDeadBefore(ctx context.Context, pool *pgxpool.Pool, before time.Time, limit int) (int64, error) {
	tag, err := pool.Exec(ctx, `DELETE FROM outbox WHERE id IN (
		SELECT id FROM outbox WHERE dead_at < $1 AND delivered_at IS NULL
		LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("delete dead letters: %w", err)
	}
	return tag.RowsAffected(), nil
}

// DeadFilter selects dead letters oldest first, the order a bulk replay
// re-drives them in. Empty fields and nil times select all.
type DeadFilter struct {
	TopicType    string     // "topic/type"
	Since, Until *time.Time // dead_at in [Since, Until)
	// AfterAt and AfterID are the keyset of the previous page's last row
	// (AfterAt nil: from the first).
	AfterAt *time.Time
	AfterID uuid.UUID
}

// OldestDead returns up to limit dead letters f selects, oldest dead
// first (package replay pages through them by f's keyset).
func (s *Store) OldestDead(ctx context.Context, f DeadFilter, limit int) ([]DeadLetter, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, topic, type, dedupe_key, attempts, redrives, created_at, dead_at, coalesce(last_error, '')
		FROM outbox
		WHERE dead_at IS NOT NULL AND delivered_at IS NULL AND ($1 = '' OR topic || '/' || type = $1)
		  AND ($2::timestamptz IS NULL OR dead_at >= $2) AND ($3::timestamptz IS NULL OR dead_at < $3)
		  AND ($4::timestamptz IS NULL OR (dead_at, id) > ($4, $5::uuid))
		ORDER BY dead_at, id LIMIT $6`, f.TopicType, f.Since, f.Until, f.AfterAt, f.AfterID, limit)
	if err != nil {
		return nil, fmt.Errorf("read dead letters oldest first: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		err := row.Scan(&d.ID, &d.Topic, &d.Type, &d.DedupeKey, &d.Attempts, &d.Redrives, &d.CreatedAt, &d.DeadAt, &d.LastError)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("read dead letters oldest first: %w", err)
	}
	return out, nil
}

// DeadGroups are the dead letters grouped by topic/type (Type) and last
// error (Message): the incidents' view of the outbox.
func (s *Store) DeadGroups(ctx context.Context, samples int) ([]failcause.Group, error) {
	rows, err := s.pool.Query(ctx, `SELECT topic || '/' || type, '', coalesce(last_error, ''), count(*), min(dead_at), max(dead_at),
			(array_agg(id::text ORDER BY dead_at DESC, id))[1:$1]
		FROM outbox WHERE dead_at IS NOT NULL AND delivered_at IS NULL GROUP BY topic, type, 3`, samples)
	if err != nil {
		return nil, fmt.Errorf("read dead letter groups: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (failcause.Group, error) {
		var g failcause.Group
		err := r.Scan(&g.Type, &g.Account, &g.Message, &g.Count, &g.First, &g.Last, &g.Samples)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("read dead letter groups: %w", err)
	}
	return out, nil
}
