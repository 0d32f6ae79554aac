#!/usr/bin/env bash
# scripts/bench-ab.sh A_BINARY B_BINARY — two builds of the service, one
# ingest run each per round, interleaved (A B, B A, A B, ...), on the
# shared local stack: a fresh database and fresh tables per run, `loadgen`
# at BENCH_CONCURRENCY (32) for BENCH_DURATION (12s) without baselines.
# Per run it prints the rate, p99, DynamoDB requests per event and, over a
# 10 s window inside the measured phase, the CPU ticks (1/100 s) of
# DynamoDB Local (the process listening on DYNAMODB_ENDPOINT's port), of
# the service and of the whole machine, then each build's medians per
# event. For A/B measurements on a machine others use: the ratios of
# medians are what holds (BENCHMARKS.md).
#
#   git archive main | tar -x -C /tmp/main && (cd /tmp/main && go build -o /tmp/a ./cmd/stripe-payments)
#   go build -o /tmp/b ./cmd/stripe-payments && BENCH_ROUNDS=3 scripts/bench-ab.sh /tmp/a /tmp/b
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
[ $# -eq 2 ] && [ -x "$1" ] && [ -x "$2" ] || { echo "usage: $0 A_BINARY B_BINARY" >&2; exit 2; }
A="$1" B="$2"
ROUNDS="${BENCH_ROUNDS:-3}" C="${BENCH_CONCURRENCY:-32}" D="${BENCH_DURATION:-12s}"
PORT="${BENCH_PORT:-18481}" ADMIN="$((${BENCH_PORT:-18481} + 10))"
OUT="$ROOT/.dev/bench-ab"
mkdir -p "$OUT"
eval "$(scripts/devstack.sh env)"
go build -o "$OUT/loadgen" ./cmd/loadgen
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
port="${DYNAMODB_ENDPOINT##*:}" port="${port%%/*}"
ddb="$(ss -Hltnp "sport = :$port" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)"
[ -n "$ddb" ] || { echo "bench-ab: no process listens on $DYNAMODB_ENDPOINT" >&2; exit 1; }
BASE_URL="${DATABASE_URL%/*}"

run() { # run LABEL BINARY
	local tag="benchab$$_$RANDOM" pid lg t0 s0 c0 t1 s1 c1
	psql "$BASE_URL/postgres?sslmode=disable" -XtAqc "CREATE DATABASE $tag"
	(
		export DATABASE_URL="$BASE_URL/$tag?sslmode=disable" APP_ENV=development LOG_LEVEL=warn
		export LISTEN_ADDR="127.0.0.1:$PORT" ADMIN_LISTEN_ADDR="127.0.0.1:$ADMIN"
		export EVENTS_TABLE="$tag-events" BILLING_TABLE="$tag-billing" BILLING_HISTORY_TABLE="$tag-billing-history" LOCKS_TABLE="$tag-locks"
		export STRIPE_WEBHOOK_SECRET="whsec_bench_local_only" INTERNAL_API_TOKEN="bench-token"
		"$2" migrate >/dev/null 2>"$OUT/migrate.log"
		"$2" serve 2>"$OUT/serve.log" &
		pid=$!
		trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; "$OUT/loadgen" drop-tables "$EVENTS_TABLE" "$BILLING_TABLE" "$BILLING_HISTORY_TABLE" "$LOCKS_TABLE" >/dev/null 2>&1 || true' EXIT
		for _ in $(seq 1 50); do curl -fsS "http://127.0.0.1:$ADMIN/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
		"$OUT/loadgen" -baselines=false -target "http://127.0.0.1:$PORT/webhooks/stripe" -metrics "http://127.0.0.1:$ADMIN/metrics" \
			-secret whsec_bench_local_only -c "$C" -d "$D" -warmup 2s -pid "$pid" >"$OUT/loadgen.txt" 2>&1 &
		lg=$!
		sleep 3
		t0=$(ticks "$ddb") s0=$(ticks "$pid") c0=$(busy)
		sleep 10
		t1=$(ticks "$ddb") s1=$(ticks "$pid") c1=$(busy)
		wait "$lg"
		rate=$(grep -o 'c=[0-9]* *[0-9]* req/s' "$OUT/loadgen.txt" | awk '{print $2}')
		echo "$1 rate=$rate p99=$(grep -o 'p99=[0-9.]*ms' "$OUT/loadgen.txt" | cut -d= -f2)" \
			"ddb_req_per_event=$(grep -o 'DynamoDB requests per event: [0-9.]*' "$OUT/loadgen.txt" | awk '{print $NF}')" \
			"ddb_ticks=$((t1 - t0)) service_ticks=$((s1 - s0)) machine_ticks=$((c1 - c0)) load=$(cut -d' ' -f1 /proc/loadavg)"
	) | tee -a "$OUT/runs.txt"
	psql "$BASE_URL/postgres?sslmode=disable" -XtAqc "DROP DATABASE IF EXISTS $tag"
}

: >"$OUT/runs.txt"
for ((i = 0; i < ROUNDS; i++)); do
	if ((i % 2 == 0)); then run A "$A"; run B "$B"; else run B "$B"; run A "$A"; fi
done
# Medians per build, per event (ticks over 10 s, rate per second).
python3 - "$OUT/runs.txt" <<'PY'
import sys, statistics as st
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    kv = dict(x.split("=", 1) for x in f[1:])
    rate = float(kv["rate"])
    runs.setdefault(f[0], []).append({
        "rate": rate, "p99_ms": float(kv["p99"].rstrip("ms")),
        "dynamodb_ms_per_event": float(kv["ddb_ticks"]) * 10 / (rate * 10),
        "service_ms_per_event": float(kv["service_ticks"]) * 10 / (rate * 10),
        "machine_ms_per_event": float(kv["machine_ticks"]) * 10 / (rate * 10),
    })
med = {k: {m: st.median(r[m] for r in v) for m in v[0]} for k, v in runs.items()}
for k in sorted(med):
    print(k, " ".join(f"{m}={x:.3f}" for m, x in med[k].items()))
if "A" in med and "B" in med:
    print("B/A", " ".join(f"{m}={med['B'][m] / med['A'][m]:.2f}x" for m in med["A"]))
PY
