// Package lease is the loop of a background runner that works through a
// Postgres table of long jobs (bulk replays, billing batch collections) one
// job at a time, on every replica at once, under a lease:
//
//   - claim: take the oldest running job nobody holds, or whose holder's
//     lease ran out (a crashed or stopped replica), FOR UPDATE SKIP LOCKED;
//   - heartbeat: every piece of progress the runner records renews the lease
//     in the same statement (Renew), so a runner that stops recording
//     loses the job after one lease and another takes it over;
//   - work: the caller's once (Run) carries the job to its end;
//   - release: the caller's finish clears lease_owner with the job's end;
//   - stop on ctx: Run returns when ctx ends; the job in hand is left to the
//     lease and resumed from what was recorded.
//
// The table has the columns id, status ('running' while there is work),
// lease_owner, leased_until and created_at.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config of a Runner.
type Config struct {
	// Table is the jobs table (a name from code, never from input).
	Table string
	// What names one job in errors ("replay", "batch"); Name the runner
	// in its logs ("bulk replay").
	What, Name string
	// Lease is how long a runner holds a job without recording progress
	// before another (after a restart, another replica) takes it over
	// (0: 30 s).
	Lease time.Duration
	// Poll is how often an idle runner looks for work (0: 2 s); Nudge
	// wakes it at once.
	Poll time.Duration
	Log  *slog.Logger
}

// Runner claims and renews leases on one table for one process.
type Runner struct {
	pool  *pgxpool.Pool
	cfg   Config
	owner string
	nudge chan struct{}
}

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// New returns a Runner with an owner id of its own. It panics on a table
// name that is not a plain identifier: the name comes from code.
func New(pool *pgxpool.Pool, cfg Config) *Runner {
	if !tableName.MatchString(cfg.Table) {
		panic(fmt.Sprintf("lease: table %q is not a plain identifier", cfg.Table))
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Runner{pool: pool, cfg: cfg, owner: hex.EncodeToString(b[:]), nudge: make(chan struct{}, 1)}
}

// Owner is this runner's lease_owner.
func (r *Runner) Owner() string { return r.owner }

// Interval is the lease as a Postgres interval parameter: record statements
// set leased_until = now() + $n::interval with it (the heartbeat).
func (r *Runner) Interval() string { return r.cfg.Lease.String() }

// Nudge wakes the runner: a job was started.
func (r *Runner) Nudge() {
	select {
	case r.nudge <- struct{}{}:
	default:
	}
}

// Run calls once while it works (a job claimed and carried out, no error),
// then idle (nil: nothing) and waits for a nudge or the poll, until ctx
// ends. An error is logged and the runner waits before trying again.
func (r *Runner) Run(ctx context.Context, once func(context.Context) (worked bool, err error), idle func(context.Context)) {
	for {
		for {
			worked, err := once(ctx)
			if err != nil && ctx.Err() == nil {
				r.cfg.Log.Warn(r.cfg.Name, "error", err)
			}
			if !worked || err != nil || ctx.Err() != nil {
				break
			}
		}
		if idle != nil {
			idle(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.nudge:
		case <-time.After(r.cfg.Poll):
		}
	}
}

// Claim takes the oldest running job nobody holds (or whose lease ran out)
// for this runner; "" when there is none.
func (r *Runner) Claim(ctx context.Context) (string, error) {
	var id string
	err := r.pool.QueryRow(ctx, `UPDATE `+r.cfg.Table+` SET lease_owner = $1, leased_until = now() + $2::interval
		WHERE id = (SELECT id FROM `+r.cfg.Table+` WHERE status = 'running' AND (leased_until IS NULL OR leased_until < now())
		            ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING id`, r.owner, r.Interval()).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("claim a %s: %w", r.cfg.What, err)
	}
	return id, nil
}

// Execer is a pool or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Renew extends the lease on job id through db (a transaction that records
// progress with it, or the pool); held is false when this runner no longer
// holds a running job id (taken over, cancelled, done).
func (r *Runner) Renew(ctx context.Context, db Execer, id string) (held bool, err error) {
	tag, err := db.Exec(ctx, `UPDATE `+r.cfg.Table+` SET leased_until = now() + $3::interval
		WHERE id = $1 AND lease_owner = $2 AND status = 'running'`, id, r.owner, r.Interval())
	if err != nil {
		return false, fmt.Errorf("%s %s: renew lease: %w", r.cfg.What, id, err)
	}
	return tag.RowsAffected() == 1, nil
}
