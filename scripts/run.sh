#!/usr/bin/env bash
# scripts/run.sh [serve flags...] — `make run`:
# start the local stack (what is not already up), build, migrate, then run
# `stripe-payments serve` until SIGINT/SIGTERM; then stop the local
# components this run started (and only those).
# shellcheck disable=SC2317 # trap handlers are reached through traps
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="$PATH:/usr/local/go/bin"
fi

mkdir -p .dev
export DEVSTACK_STARTED_FILE="$ROOT/.dev/started.run.$$"
serve_pid=""

cleanup() {
	local rc=$?
	trap - INT TERM
	if [ -n "$serve_pid" ] && kill -0 "$serve_pid" 2>/dev/null; then
		kill -TERM "$serve_pid" 2>/dev/null || true
		wait "$serve_pid" 2>/dev/null || true
	fi
	scripts/devstack.sh down --started-only || true
	exit "$rc"
}
trap cleanup EXIT
# Until serve runs, a signal just ends the script (through cleanup).
trap 'exit 130' INT
trap 'exit 143' TERM

if ! scripts/devstack.sh up >/dev/null; then
	echo "FATAL: the local stack (DynamoDB Local + PostgreSQL 15) could not start; see the messages above" >&2
	exit 1
fi
eval "$(scripts/devstack.sh env)"
# Development mode: the dev defaults (DESIGN §3) apply only under it.
export APP_ENV=development
export LISTEN_ADDR="${LISTEN_ADDR:-127.0.0.1:8080}"
export ADMIN_LISTEN_ADDR="${ADMIN_LISTEN_ADDR:-127.0.0.1:8081}"

echo "== go build"
go build -o bin/stripe-payments ./cmd/stripe-payments
echo "== migrate"
bin/stripe-payments migrate

cat <<EOF
== stripe-payments serve
  public           http://$LISTEN_ADDR   (POST /webhooks/stripe, /healthz: all the internet may reach)
  admin            http://$ADMIN_LISTEN_ADDR   (console /ops/, /internal/v1, /v1/purchases, /metrics, /readyz, /healthz)
  DynamoDB Local   $DYNAMODB_ENDPOINT
  PostgreSQL 15    $DATABASE_URL
Ctrl-C (SIGINT) or SIGTERM stops the service and the local components this run started.
EOF

# serve runs as a background job so that this shell keeps handling signals:
# on INT or TERM it sends SIGTERM to serve (a non-interactive shell starts
# background jobs with SIGINT ignored, so TERM is what reliably arrives),
# waits for it to shut down, then stops the stack. A second signal kills it.
bin/stripe-payments serve "$@" &
serve_pid=$!
signals=0
forward() {
	signals=$((signals + 1))
	if [ "$signals" -ge 2 ]; then
		echo "second signal: killing serve (pid $serve_pid)" >&2
		kill -KILL "$serve_pid" 2>/dev/null || true
	else
		echo "stopping serve (pid $serve_pid)..." >&2
		kill -TERM "$serve_pid" 2>/dev/null || true
	fi
}
trap forward INT TERM

# `wait` returns early (status > 128) whenever a trapped signal arrives:
# keep waiting until serve is really gone, then collect its exit status.
while kill -0 "$serve_pid" 2>/dev/null; do
	wait "$serve_pid" 2>/dev/null || true
done
status=0
wait "$serve_pid" 2>/dev/null || status=$?
serve_pid=""
echo "serve exited with status $status" >&2
exit "$status"
