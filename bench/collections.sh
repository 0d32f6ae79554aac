#!/usr/bin/env bash
# bench/collections.sh — BENCHMARKS.md "Collections at scale": the billing
# queue against the in-process run, side by side in one run
# (BenchmarkCollectionsAtScale in cmd/stripe-payments).
#
#   * starts a DURABLE PostgreSQL 15 of its own (fsync, synchronous_commit
#     and full_page_writes on; data in .dev/bench-pg-collections, port
#     BENCH_PG_PORT), as bench-peer does: the queue's outcomes and the
#     Stripe budget are Postgres commits, and the dev stack's Postgres
#     (fsync off) would flatter them;
#   * DynamoDB Local and the local SQS server are the running dev stack's
#     (load its environment first: eval "$(scripts/devstack.sh env)");
#   * every variant gets a fresh database, tables and FIFO queue (+ DLQ),
#     removed afterwards; Postgres is stopped on exit.
#
# Environment: COLLECTIONS_BENCH_SUBS (2000), COLLECTIONS_BENCH_VARIANTS
# (inprocess,queue1,queue3,queue3kill), BENCH_PG_PORT (55443),
# BENCH_TIMEOUT (go test's -timeout, 120m).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
export PATH="$PATH:/usr/local/go/bin"

PG_ROOT="$ROOT/.dev/bench-pg-collections"
PG_DATA="$PG_ROOT/data"
PG_SOCK="$PG_ROOT/run"
PGBIN="/usr/lib/postgresql/15/bin"
PG_PORT="${BENCH_PG_PORT:-55443}"

log() { printf 'bench-collections: %s\n' "$*" >&2; }
die() {
	log "FATAL: $*"
	exit 1
}
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
psql_bench() { "$PGBIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -XtAq -v ON_ERROR_STOP=1 "$@"; }

[ -n "${DYNAMODB_ENDPOINT:-}" ] || die "DYNAMODB_ENDPOINT is not set: start the stack and load its environment (eval \"\$(scripts/devstack.sh env)\")"
[ -n "${SQS_ENDPOINT:-}" ] || die "SQS_ENDPOINT is not set: start the stack and load its environment (eval \"\$(scripts/devstack.sh env)\")"

pg_started=0
cleanup() {
	if [ "$pg_started" = 1 ]; then
		as_pg "$PGBIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT

mkdir -p "$PG_ROOT" "$PG_SOCK"
if [ "$(id -u)" -eq 0 ]; then chown -R postgres:postgres "$PG_ROOT"; fi
chmod 700 "$PG_ROOT"
as_pg test -w "$PG_ROOT" || die "the postgres user cannot write $PG_ROOT (make its parents o+x; scripts/devstack.sh up does that for .dev)"
if [ ! -f "$PG_DATA/PG_VERSION" ]; then
	rm -rf "$PG_DATA"
	log "initdb $PG_DATA"
	as_pg "$PGBIN/initdb" -D "$PG_DATA" -A trust -U postgres -E UTF8 --locale=C >"$PG_ROOT/initdb.log" 2>&1 || die "initdb failed (see $PG_ROOT/initdb.log)"
fi
if "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
	die "something already answers on 127.0.0.1:$PG_PORT (a benchmark still running? set BENCH_PG_PORT)"
fi
rm -f "$PG_DATA/postmaster.pid"
log "starting a durable Postgres 15 on 127.0.0.1:$PG_PORT (fsync, synchronous_commit, full_page_writes on)"
as_pg "$PGBIN/pg_ctl" -D "$PG_DATA" -l "$PG_ROOT/postgres.log" -w -t 60 \
	-o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k '$PG_SOCK' -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c max_connections=300" \
	start >/dev/null || die "Postgres did not start (see $PG_ROOT/postgres.log)"
pg_started=1
[ "$(psql_bench -d postgres -c 'SHOW fsync')" = on ] || die "fsync is not on"
[ "$(psql_bench -d postgres -c 'SHOW synchronous_commit')" = on ] || die "synchronous_commit is not on"

log "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable" APP_ENV=development \
	go test -run '^$' -bench BenchmarkCollectionsAtScale -benchtime 1x -timeout "${BENCH_TIMEOUT:-120m}" ./cmd/stripe-payments/
log "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
