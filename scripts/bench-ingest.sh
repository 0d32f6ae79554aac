#!/usr/bin/env bash
# scripts/bench-ingest.sh — the ingest load test of `make bench`.
#
# Expects the local stack's environment (scripts/test.sh bench sets it up).
# Builds the service and cmd/loadgen, starts `serve` on a loopback port with
# fresh tables, measures the raw DynamoDB conditional-put and Postgres
# transaction rates and then ingest, all at the same concurrency in the same
# run, and writes the Markdown table between the loadgen markers of
# BENCHMARKS.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

CONCURRENCY="${BENCH_CONCURRENCY:-32}"
DURATION="${BENCH_DURATION:-20s}"
PORT="${BENCH_PORT:-18181}"
ADMIN_PORT="${BENCH_ADMIN_PORT:-18191}"
OUT="$ROOT/.dev/bench"
mkdir -p "$OUT"

go build -o "$OUT/stripe-payments" ./cmd/stripe-payments
go build -o "$OUT/loadgen" ./cmd/loadgen

export APP_ENV=development LISTEN_ADDR="127.0.0.1:$PORT" ADMIN_LISTEN_ADDR="127.0.0.1:$ADMIN_PORT" LOG_LEVEL=warn
export EVENTS_TABLE="bench-events-$$" BILLING_TABLE="bench-billing-$$" BILLING_HISTORY_TABLE="bench-billing-history-$$" LOCKS_TABLE="bench-locks-$$"
export STRIPE_WEBHOOK_SECRET="whsec_bench_local_only" INTERNAL_API_TOKEN="bench-token"
"$OUT/stripe-payments" migrate >/dev/null 2>"$OUT/migrate.log"
"$OUT/stripe-payments" serve 2>"$OUT/serve.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do
	curl -fsS "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1 && break
	sleep 0.2
done

"$OUT/loadgen" -target "http://127.0.0.1:$PORT/webhooks/stripe" -metrics "http://127.0.0.1:$ADMIN_PORT/metrics" -c "$CONCURRENCY" -d "$DURATION" \
	-pid "$pid" -markdown "$OUT/ingest.md"

# Replace the table between the markers, keeping the rest of the file.
python3 - "$ROOT/BENCHMARKS.md" "$OUT/ingest.md" <<'PY'
import sys, datetime, platform, os
path, table = sys.argv[1], open(sys.argv[2]).read()
doc = open(path).read()
begin, end = "<!-- loadgen:begin -->", "<!-- loadgen:end -->"
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
stamp = f"Measured {datetime.date.today().isoformat()} on {os.cpu_count()} cores ({cpu}) by `make bench`.\n\n"
if begin in doc and end in doc:
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc = head + begin + "\n" + stamp + table + end + tail
    open(path, "w").write(doc)
PY
echo "BENCHMARKS.md updated"
