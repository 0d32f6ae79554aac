package opsdata

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sessions stores the console's server-side sessions (ops_sessions, shared
// by every replica). It keeps digests and tags only; making and checking
// cookie values is the console's (internal/ops).
type Sessions struct {
	pool *pgxpool.Pool
}

// NewSessions returns the session table on pool.
func NewSessions(pool *pgxpool.Pool) *Sessions { return &Sessions{pool: pool} }

// NewSession is a session to store.
type NewSession struct {
	IDHash    []byte // SHA-256 of the cookie value
	CSRF      string
	Remote    string
	TokenTag  []byte
	Now       time.Time
	ExpiresAt time.Time
	// IdleSince: sessions last seen at or before it have ended and are
	// deleted first.
	IdleSince time.Time
}

// Issue deletes ended sessions (the index keeps this cheap), then stores s.
func (st *Sessions) Issue(ctx context.Context, s NewSession) error {
	if _, err := st.pool.Exec(ctx, `DELETE FROM ops_sessions WHERE expires_at <= $1 OR last_seen <= $2`,
		s.Now, s.IdleSince); err != nil {
		return fmt.Errorf("prune console sessions: %w", err)
	}
	if _, err := st.pool.Exec(ctx, `INSERT INTO ops_sessions (id_hash, csrf, created_at, last_seen, expires_at, remote, token_tag)
		VALUES ($1, $2, $3, $3, $4, $5, $6)`, s.IDHash, s.CSRF, s.Now, s.ExpiresAt, s.Remote, s.TokenTag); err != nil {
		return fmt.Errorf("store console session: %w", err)
	}
	return nil
}

// ErrNoSession: no live session has that digest and tag.
var ErrNoSession = errors.New("no session")

// Live is a live session's CSRF token.
type Live struct {
	IDHash []byte
	CSRF   string
}

// Touch returns the live session of idHash opened under tag (not expired
// at now, last seen after idleSince) and marks it used at now when its
// last use is at or before touchBefore: most requests only read the row.
// ErrNoSession when there is none.
func (st *Sessions) Touch(ctx context.Context, idHash, tag []byte, now, touchBefore, idleSince time.Time) (Live, error) {
	var out Live
	err := st.pool.QueryRow(ctx, `WITH live AS (
			SELECT id_hash, csrf, last_seen FROM ops_sessions
			WHERE id_hash = $1 AND expires_at > $2 AND last_seen > $4 AND token_tag = $5),
		touched AS (
			UPDATE ops_sessions o SET last_seen = $2 FROM live
			WHERE o.id_hash = live.id_hash AND live.last_seen <= $3)
		SELECT id_hash, csrf FROM live`, idHash, now, touchBefore, idleSince, tag).Scan(&out.IDHash, &out.CSRF)
	if errors.Is(err, pgx.ErrNoRows) {
		return Live{}, ErrNoSession
	}
	if err != nil {
		return Live{}, fmt.Errorf("read console session: %w", err)
	}
	return out, nil
}

// Revoke deletes a session: its cookie is refused by every replica.
func (st *Sessions) Revoke(ctx context.Context, idHash []byte) error {
	if _, err := st.pool.Exec(ctx, `DELETE FROM ops_sessions WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("end console session: %w", err)
	}
	return nil
}
