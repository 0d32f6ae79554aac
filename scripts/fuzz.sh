#!/usr/bin/env bash
# scripts/fuzz.sh [FUZZTIME] — run every fuzz target for FUZZTIME each
# (default 50000x: the short run of `make test`; `make fuzz` runs 1000000x).
# Budgets are execution counts, not durations: Go 1.26's fuzz coordinator
# can fail a target with a spurious "context deadline exceeded" when a
# duration runs out on a starved machine (golang/go#75804, fixed in 1.27);
# a count has no deadline to race, starvation only makes it slower.
# Targets that need the local stack expect its environment to be loaded.
# New crashers land in the package's testdata/fuzz and then fail `go test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fuzztime="${1:-50000x}"
# package  target
targets=(
	"./webhook/ FuzzVerify"
	"./internal/events/ FuzzParse"
	"./internal/stripeevent/ FuzzParseAgreesWithStripeGo"
	"./internal/tracking/ FuzzFlows"
	"./internal/billing/store/ FuzzReplaceFold"
)
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "fuzz $name ($pkg) for $fuzztime"
	# The progress lines are noise on success; on a failure the whole
	# output is the diagnosis (a worker's crash, a setup error), so keep it.
	if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" >"$out" 2>&1; then
		tail -n 3 "$out"
	else
		grep -v '^fuzz: elapsed' "$out" | tail -n 200
		exit 1
	fi
done
