#!/usr/bin/env bash
# scripts/bench-peer.sh — `make bench-peer`: this service against
# @supabase/stripe-sync-engine 0.48.5 on the same machine, in one run.
#
#   * installs the peer from the npm registry into .dev/peer (bench/peer's
#     package.json + package-lock.json, `npm ci`), runs it behind
#     bench/peer/server.cjs on loopback, its Stripe client on stripe-mock;
#   * starts a DURABLE PostgreSQL 15 of its own (fsync, synchronous_commit
#     and full_page_writes on; data in .dev/bench-pg, port BENCH_PG_PORT),
#     used by both services (one database each, fresh every run);
#   * this service also uses the shared DynamoDB Local (fresh tables,
#     deleted afterwards); the local stack is started if it is not up;
#   * `loadgen compare` measures the same-run ceilings, then sends the same
#     signed customer.updated stream (unique ids) to both, at each
#     concurrency, in interleaved rounds, and prints medians and ratios;
#   * the table goes between the bench-peer markers of BENCHMARKS.md;
#   * everything it started is stopped on exit.
#
# Environment: BENCH_ROUNDS (3), BENCH_DURATION (10s), BENCH_CONCURRENCY
# (1,32), BENCH_PG_PORT (55442), BENCH_PORT_BASE (18280: service, +1 peer,
# +2 stripe-mock, +3 pprof, +4 the events-table stub, +5 the stubbed
# instance), BENCH_SERVICE_ENV (extra VAR=value words for
# the service, e.g. "INGEST_FLUSHERS=4"), BENCH_WRITE=0 to leave
# BENCHMARKS.md alone, BENCH_PROFILE=1 to save CPU profiles of this service
# (first round, each concurrency) as .dev/bench-peer/cpu-c<N>.pprof.
#
# The same run also measures its ceiling (BENCH_STUBBED=0 turns it off): a
# second instance of this service (same binary and settings, database
# bench_ours_stub, tables of its own) whose events-table BatchWriteItem,
# BatchGetItem and TransactWriteItems of puts are answered by `loadgen stub-table` instead of DynamoDB
# Local. It does all its own work for a record but the JVM none, so its
# column says what sharing the 2 cores with the stand-in costs. A
# diagnostic: its records are not in the table.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
export PATH="$PATH:/usr/local/go/bin"

DEV="$ROOT/.dev"
OUT="$DEV/bench-peer"
PEER_DIR="$DEV/peer"
PG_ROOT="$DEV/bench-pg"
PG_DATA="$PG_ROOT/data"
PG_SOCK="$PG_ROOT/run"
PGBIN="/usr/lib/postgresql/15/bin"
PG_PORT="${BENCH_PG_PORT:-55442}"
BASE="${BENCH_PORT_BASE:-18280}"
OURS_PORT=$BASE PEER_PORT=$((BASE + 1)) MOCK_PORT=$((BASE + 2)) PPROF_PORT=$((BASE + 3)) STUB_PORT=$((BASE + 4)) STUBBED_PORT=$((BASE + 5))
# each instance of this service's admin listener (/readyz, /metrics): its port + 10
OURS_ADMIN_PORT=$((OURS_PORT + 10)) STUBBED_ADMIN_PORT=$((STUBBED_PORT + 10))
STUBBED="${BENCH_STUBBED:-1}"
ROUNDS="${BENCH_ROUNDS:-3}"
DURATION="${BENCH_DURATION:-10s}"
CONCURRENCY="${BENCH_CONCURRENCY:-1,32}"
SECRET_OURS="whsec_bench_ours_local_only"
SECRET_PEER="whsec_bench_peer_local_only"
mkdir -p "$OUT" "$PEER_DIR"

log() { printf 'bench-peer: %s\n' "$*" >&2; }
die() {
	printf 'bench-peer: ERROR: %s\n' "$*" >&2
	exit 1
}
# The old separate diagnostic mode would now run (and write) the real
# benchmark: refuse it rather than surprise.
[ -z "${BENCH_EVENTS_TABLE_STUB:-}" ] || die "BENCH_EVENTS_TABLE_STUB is gone: every run measures the stubbed instance beside the real one (BENCH_STUBBED=0 leaves it out)"
# listener_pid URL: the pid of the process listening on URL's port on this
# machine (the DynamoDB Local actually serving DYNAMODB_ENDPOINT, whichever
# checkout started it: a worktree's own .dev holds no pid file). It reads
# the listening socket's inode from /proc/net/tcp{,6} and finds the process
# holding it; 0 when none is found (the cores table then says 0.00).
listener_pid() {
	local port hex inode fd
	port="${1##*:}" port="${port%%/*}"
	[[ "$port" =~ ^[0-9]+$ ]] || { echo 0; return; }
	hex="$(printf '%04X' "$port")"
	# fields: sl local_address rem_address st ... inode (10th); 0A is LISTEN
	inode="$(awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10; exit }' /proc/net/tcp /proc/net/tcp6 2>/dev/null)"
	if [ -n "$inode" ]; then
		for fd in /proc/[0-9]*/fd/*; do
			if [ "$(readlink "$fd" 2>/dev/null)" = "socket:[$inode]" ]; then
				fd="${fd#/proc/}"
				echo "${fd%%/*}"
				return
			fi
		done
	fi
	echo 0
}
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
psql_bench() { "$PGBIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -XtAq -v ON_ERROR_STOP=1 "$@"; }

pids=()
TABLES=()
pg_started=0
cleanup() {
	local rc=$?
	set +e
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[$i]}" 2>/dev/null && wait "${pids[$i]}" 2>/dev/null
	done
	if [ ${#TABLES[@]} -gt 0 ]; then "$OUT/loadgen" drop-tables "${TABLES[@]}" 2>/dev/null; fi
	if [ "$pg_started" = 1 ]; then
		log "stopping the benchmark's Postgres"
		as_pg "$PGBIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null 2>&1
	fi
	DEVSTACK_STARTED_FILE="$OUT/started" scripts/devstack.sh down --started-only >/dev/null 2>&1
	exit "$rc"
}
trap cleanup EXIT

wait_http() { # url what
	for _ in $(seq 1 150); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		sleep 0.2
	done
	die "$2 did not answer on $1"
}

# ---- shared stack (DynamoDB Local; also installs Postgres 15 and Java when missing)
# DynamoDB Local stands in for AWS, whose work is not on this machine's
# cores: started here, it runs in memory, as for `make test` (persisted, its
# SQLite file on disk made the same-run BatchWriteItem ceiling 2.7x slower
# on 2026-11-26). One already up keeps its mode; the stamp says which.
DEV_DYNAMO_PERSIST="${DEV_DYNAMO_PERSIST:-0}" DEVSTACK_STARTED_FILE="$OUT/started" scripts/devstack.sh up >/dev/null
eval "$(scripts/devstack.sh env)"
DDB_MODE="$(cat .dev/dynamodb.mode 2>/dev/null || echo unknown)"
[ "$DDB_MODE" = memory ] || log "WARNING: DynamoDB Local runs $DDB_MODE, not in memory: stop the stack (scripts/devstack.sh down) for a comparable run"
export DDB_MODE

# ---- the peer, from the npm registry, pinned by the lock file
if ! cmp -s bench/peer/package-lock.json "$PEER_DIR/package-lock.json" || [ ! -d "$PEER_DIR/node_modules/@supabase/stripe-sync-engine" ]; then
	log "npm ci @supabase/stripe-sync-engine into $PEER_DIR"
	cp bench/peer/package.json bench/peer/package-lock.json "$PEER_DIR/"
	npm ci --prefix "$PEER_DIR" --no-audit --no-fund --loglevel=error </dev/null >&2 || die "npm ci failed"
fi

# ---- a durable Postgres of its own
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
	-o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k '$PG_SOCK' -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c max_connections=200" \
	start >/dev/null || die "Postgres did not start (see $PG_ROOT/postgres.log)"
pg_started=1
[ "$(psql_bench -d postgres -c 'SHOW fsync')" = on ] || die "fsync is not on"
[ "$(psql_bench -d postgres -c 'SHOW synchronous_commit')" = on ] || die "synchronous_commit is not on"
for db in bench_ours bench_ours_stub bench_peer; do
	psql_bench -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
done
PG_URL="postgres://postgres@127.0.0.1:$PG_PORT"

# ---- builds
go build -o "$OUT/stripe-payments" ./cmd/stripe-payments
go build -o "$OUT/loadgen" ./cmd/loadgen

# ---- stripe-mock (the peer's Stripe client; this service's STRIPE_API_BASE)
MOCK="${STRIPE_MOCK_BIN:-$(go env GOPATH)/bin/stripe-mock}"
[ -x "$MOCK" ] || go install github.com/stripe/stripe-mock@v0.203.0
"$MOCK" -http-addr "127.0.0.1:$MOCK_PORT" >"$OUT/stripe-mock.log" 2>&1 &
pids+=($!)

# ---- this service, fresh tables
TAG="$(date +%s)-$$"
TABLES=("benchpeer-events-$TAG" "benchpeer-billing-$TAG" "benchpeer-billing-history-$TAG" "benchpeer-locks-$TAG")
start_service() { # name port pprof-addr database tag dynamodb-endpoint
	(
		export APP_ENV=development LOG_LEVEL=warn LISTEN_ADDR="127.0.0.1:$2" ADMIN_LISTEN_ADDR="127.0.0.1:$(($2 + 10))" PPROF_ADDR="$3" DYNAMODB_ENDPOINT="$6"
		export DATABASE_URL="$PG_URL/$4?sslmode=disable" STRIPE_API_BASE="http://127.0.0.1:$MOCK_PORT"
		export STRIPE_API_KEY=sk_test_bench_local_only STRIPE_WEBHOOK_SECRET="$SECRET_OURS" INTERNAL_API_TOKEN=bench-token ACTIONS_SECRET=bench-actions-secret
		export EVENTS_TABLE="benchpeer-events-$5" BILLING_TABLE="benchpeer-billing-$5" BILLING_HISTORY_TABLE="benchpeer-billing-history-$5" LOCKS_TABLE="benchpeer-locks-$5"
		# shellcheck disable=SC2086 # word splitting of VAR=value pairs is the point
		[ -z "${BENCH_SERVICE_ENV:-}" ] || export ${BENCH_SERVICE_ENV}
		"$OUT/stripe-payments" migrate >"$OUT/migrate-$1.log" 2>&1 || { cat "$OUT/migrate-$1.log" >&2; exit 1; }
		exec "$OUT/stripe-payments" serve 2>"$OUT/serve-$1.log"
	) &
	pids+=($!)
}
start_service ours "$OURS_PORT" "127.0.0.1:$PPROF_PORT" bench_ours "$TAG" "$DYNAMODB_ENDPOINT"
ours_pid=$!

# ---- the same run's ceiling: a second instance, its events-table batches stubbed
STUBBED_ARGS=()
if [ "$STUBBED" = 1 ]; then
	STAG="stub-$TAG"
	TABLES+=("benchpeer-events-$STAG" "benchpeer-billing-$STAG" "benchpeer-billing-history-$STAG" "benchpeer-locks-$STAG")
	"$OUT/loadgen" stub-table -table "benchpeer-events-$STAG" -upstream "$DYNAMODB_ENDPOINT" -listen "127.0.0.1:$STUB_PORT" 2>"$OUT/stub.log" &
	pids+=($!)
	stub_pid=$!
	for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$STUB_PORT" && break; sleep 0.1; done
	start_service stubbed "$STUBBED_PORT" "" bench_ours_stub "$STAG" "http://127.0.0.1:$STUB_PORT"
	stubbed_pid=$!
	STUBBED_ARGS=(-stubbed "http://127.0.0.1:$STUBBED_PORT/webhooks/stripe" -stubbed-secret "$SECRET_OURS" -stubbed-metrics "http://127.0.0.1:$STUBBED_ADMIN_PORT/metrics" -stubbed-pid "$stubbed_pid" -stub-pid "$stub_pid")
fi

# ---- the peer
PEER_MODULES="$PEER_DIR/node_modules" PEER_DATABASE_URL="$PG_URL/bench_peer?sslmode=disable" \
	PEER_LISTEN="127.0.0.1:$PEER_PORT" PEER_WEBHOOK_SECRET="$SECRET_PEER" PEER_STRIPE_API="http://127.0.0.1:$MOCK_PORT" \
	node bench/peer/server.cjs >"$OUT/peer.log" 2>&1 &
pids+=($!)
peer_pid=$!

wait_http "http://127.0.0.1:$OURS_ADMIN_PORT/readyz" "this service"
if [ "$STUBBED" = 1 ]; then wait_http "http://127.0.0.1:$STUBBED_ADMIN_PORT/readyz" "this service's stubbed instance"; fi
for _ in $(seq 1 150); do
	grep -q listening "$OUT/peer.log" && break
	kill -0 "$peer_pid" 2>/dev/null || { cat "$OUT/peer.log" >&2; die "the peer exited"; }
	sleep 0.2
done
grep -q listening "$OUT/peer.log" || die "the peer did not start (see $OUT/peer.log)"
DYNAMODB_PID="$(listener_pid "$DYNAMODB_ENDPOINT")"
[ "$DYNAMODB_PID" != 0 ] || log "WARNING: no process found listening for $DYNAMODB_ENDPOINT; DynamoDB Local's CPU will read 0.00"
log "this service pid $ours_pid on :$OURS_PORT (pprof :$PPROF_PORT), stripe-sync-engine pid $peer_pid on :$PEER_PORT"

"$OUT/loadgen" compare -peer-name "stripe-sync-engine 0.48.5" \
	-ours "http://127.0.0.1:$OURS_PORT/webhooks/stripe" -ours-metrics "http://127.0.0.1:$OURS_ADMIN_PORT/metrics" -ours-secret "$SECRET_OURS" -ours-pid "$ours_pid" \
	-peer "http://127.0.0.1:$PEER_PORT/webhooks" -peer-secret "$SECRET_PEER" -peer-pid "$peer_pid" \
	-database-url "$PG_URL/postgres?sslmode=disable" \
	-dynamodb-pid "$DYNAMODB_PID" -postgres-pid "$(head -1 "$PG_DATA/postmaster.pid")" \
	-c "$CONCURRENCY" -rounds "$ROUNDS" -d "$DURATION" -markdown "$OUT/compare.md" "${STUBBED_ARGS[@]}" \
	${BENCH_PROFILE:+-pprof "http://127.0.0.1:$PPROF_PORT" -profile-dir "$OUT"} | tee "$OUT/compare.txt"

# Both must have stored every event they acknowledged.
log "rows: this service's ledger $(psql_bench -d bench_ours -c 'SELECT count(*) FROM processed_events'), the peer's customers $(psql_bench -d bench_peer -c 'SELECT count(*) FROM stripe.customers')"
if [ "$STUBBED" = 1 ]; then log "rows: the stubbed instance's ledger $(psql_bench -d bench_ours_stub -c 'SELECT count(*) FROM processed_events')"; fi

if [ "${BENCH_WRITE:-1}" = 1 ]; then
	python3 - "$ROOT/BENCHMARKS.md" "$OUT/compare.md" <<'PY'
import sys, datetime, os, platform
path, table = sys.argv[1], open(sys.argv[2]).read()
doc = open(path).read()
begin, end = "<!-- bench-peer:begin -->", "<!-- bench-peer:end -->"
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
load = open("/proc/loadavg").read().split()[:3]
extra = os.environ.get("BENCH_SERVICE_ENV", "").strip()
how = f"`BENCH_SERVICE_ENV='{extra}' make bench-peer`" if extra else "`make bench-peer`"
mode = os.environ.get("DDB_MODE", "unknown")
stamp = f"Measured {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC on {os.cpu_count()} cores ({cpu}), DynamoDB Local {mode}, load average {' '.join(load)} at the end, by {how}.\n\n"
if begin in doc and end in doc:
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    open(path, "w").write(head + begin + "\n" + stamp + table + end + tail)
    print("BENCHMARKS.md updated")
PY
fi
