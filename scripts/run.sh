#!/usr/bin/env bash
# scripts/run.sh — `make run`:
# start the local stack (what is not already up; DynamoDB Local persisted
# under .dev/dynamodb), build, migrate, start the local Stripe
# (cmd/stripe-local on LOCAL_STRIPE_ADDR, docs/design.md §3 "The embedded default
# for Stripe") unless STRIPE_API_BASE is set, then run `stripe-payments
# serve` until SIGINT/SIGTERM; then stop what this run started (and only
# that).
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
stripe_pid=""
# What this run uses, for the README's walk-through in another terminal
# (it sources the file); removed when the run ends.
RUN_ENV="$ROOT/.dev/run.env"

cleanup() {
	local rc=$?
	trap - INT TERM
	if [ -n "$serve_pid" ] && kill -0 "$serve_pid" 2>/dev/null; then
		kill -TERM "$serve_pid" 2>/dev/null || true
		wait "$serve_pid" 2>/dev/null || true
	fi
	if [ -n "$stripe_pid" ] && kill -0 "$stripe_pid" 2>/dev/null; then
		kill -TERM "$stripe_pid" 2>/dev/null || true
		wait "$stripe_pid" 2>/dev/null || true
	fi
	scripts/devstack.sh down --started-only || true
	if [ -f "$RUN_ENV" ] && grep -qx "# make run $$" "$RUN_ENV"; then
		rm -f "$RUN_ENV"
	fi
	if [ "$(cat "$RUN_PID" 2>/dev/null)" = "$$" ]; then
		rm -f "$RUN_PID"
	fi
	exit "$rc"
}
trap cleanup EXIT
# make reset refuses while this file names a live make run.
RUN_PID="$ROOT/.dev/run.pid"
echo "$$" >"$RUN_PID"
# Until serve runs, a signal just ends the script (through cleanup).
trap 'exit 130' INT
trap 'exit 143' TERM

# A stack another checkout started on the same ports is refused: the two
# would share their data (devstack.sh names the DEV_* port to change).
if ! DEVSTACK_REFUSE_FOREIGN=1 scripts/devstack.sh up >/dev/null; then
	echo "FATAL: the local stack (DynamoDB Local + PostgreSQL 15) could not start; see the messages above" >&2
	exit 1
fi
eval "$(scripts/devstack.sh env)"
# Development mode: the dev defaults (docs/design.md §3) apply only under it.
export APP_ENV=development
export LISTEN_ADDR="${LISTEN_ADDR:-127.0.0.1:8080}"
export ADMIN_LISTEN_ADDR="${ADMIN_LISTEN_ADDR:-127.0.0.1:8081}"
export LOCAL_STRIPE_ADDR="${LOCAL_STRIPE_ADDR:-127.0.0.1:8082}"
export STRIPE_WEBHOOK_SECRET="${STRIPE_WEBHOOK_SECRET:-whsec_dev_local_only}"
export INTERNAL_API_TOKEN="${INTERNAL_API_TOKEN:-dev-internal-token}"
# The local Stripe unless a Stripe was chosen (a real test key: set
# STRIPE_API_KEY=sk_test_… and STRIPE_API_BASE=https://api.stripe.com).
local_stripe=1
if [ -n "${STRIPE_API_BASE:-}" ]; then
	local_stripe=0
else
	export STRIPE_API_BASE="http://$LOCAL_STRIPE_ADDR"
	# Actions (fulfil, billing notices) go to the local Stripe's sink
	# (GET /_local/actions lists them) unless ACTIONS_URL is set.
	export ACTIONS_URL="${ACTIONS_URL:-http://$LOCAL_STRIPE_ADDR/_local/actions}"
	export ACTIONS_SECRET="${ACTIONS_SECRET:-dev-actions-secret}"
	# Poll the local Stripe's Events API every 30 s, so that what a dropped
	# delivery (LOCAL_STRIPE_DROP_RATE) missed can be seen arriving.
	export POLL_EVERY="${POLL_EVERY:-30s}"
	# The local Stripe keeps its state beside the stores' (make reset wipes
	# all three), so a restart finds Stripe and the service agreeing.
	export LOCAL_STRIPE_STATE="${LOCAL_STRIPE_STATE:-$ROOT/.dev/stripe-local/state.json}"
fi

# The billing triggers queue (docs/billing.md "Triggers") on the local SQS
# server, with its dead-letter queue and a redrive policy as Terraform's,
# unless BILLING_TRIGGERS_QUEUE_URL was chosen. Creating an existing queue
# with the same attributes answers its URL, so a restart reuses it.
sqs_call() {
	curl -sSf --max-time 10 -X POST -H 'Content-Type: application/x-amz-json-1.0' \
		-H "X-Amz-Target: AmazonSQS.$1" -d "$2" "$SQS_ENDPOINT/"
}
json_field() { sed -n 's/.*"'"$1"'" *: *"\([^"]*\)".*/\1/p'; }
if [ -z "${BILLING_TRIGGERS_QUEUE_URL:-}" ] && [ -n "${SQS_ENDPOINT:-}" ]; then
	dlq_url="$(sqs_call CreateQueue '{"QueueName":"stripe-payments-billing-triggers-dlq"}' | json_field QueueUrl)" ||
		{ echo "FATAL: could not create the billing triggers' dead-letter queue on $SQS_ENDPOINT" >&2; exit 1; }
	dlq_arn="$(sqs_call GetQueueAttributes '{"QueueUrl":"'"$dlq_url"'","AttributeNames":["QueueArn"]}' | json_field QueueArn)"
	BILLING_TRIGGERS_QUEUE_URL="$(sqs_call CreateQueue '{"QueueName":"stripe-payments-billing-triggers","Attributes":{"VisibilityTimeout":"60","RedrivePolicy":"{\"deadLetterTargetArn\":\"'"$dlq_arn"'\",\"maxReceiveCount\":5}"}}' |
		json_field QueueUrl)" || { echo "FATAL: could not create the billing triggers queue on $SQS_ENDPOINT" >&2; exit 1; }
	export BILLING_TRIGGERS_QUEUE_URL
fi

# The billing queue (docs/billing.md "Billing queue") on the local SQS
# server, so that collection runs (the first hour's test clock among them)
# go through it as they do on AWS: a FIFO queue and its dead-letter queue
# with the redrive policy Terraform gives them. CreateQueue answers an
# existing queue of the same attributes, so a restart reuses it. Offline:
# the server is local. BILLING_QUEUE_URL= (empty) keeps collections in
# process.
if [ -z "${BILLING_QUEUE_URL+set}" ] && [ -n "${SQS_ENDPOINT:-}" ]; then
	dlq_url="$(sqs_call CreateQueue '{"QueueName":"stripe-payments-billing-dlq.fifo","Attributes":{"FifoQueue":"true"}}' | json_field QueueUrl)"
	dlq_arn="$(sqs_call GetQueueAttributes "{\"QueueUrl\":\"$dlq_url\",\"AttributeNames\":[\"QueueArn\"]}" | json_field QueueArn)"
	redrive="{\\\"deadLetterTargetArn\\\":\\\"$dlq_arn\\\",\\\"maxReceiveCount\\\":${BILLING_QUEUE_MAX_RECEIVES:-10}}"
	queue_url="$(sqs_call CreateQueue "{\"QueueName\":\"stripe-payments-billing.fifo\",\"Attributes\":{\"FifoQueue\":\"true\",\"VisibilityTimeout\":\"60\",\"RedrivePolicy\":\"$redrive\"}}" | json_field QueueUrl)"
	if [ -z "$dlq_arn" ] || [ -z "$queue_url" ]; then
		echo "FATAL: could not create the billing queue on the local SQS server ($SQS_ENDPOINT)" >&2
		exit 1
	fi
	export BILLING_QUEUE_URL="$queue_url"
fi

echo "== go build"
go build -o bin/stripe-payments ./cmd/stripe-payments
go build -o bin/stripe-local ./cmd/stripe-local
echo "== migrate"
bin/stripe-payments migrate

if [ "$local_stripe" = 1 ]; then
	bin/stripe-local &
	stripe_pid=$!
fi

# It holds the token and the webhook secret: readable by the user only
# (rm first: an existing file keeps its mode).
rm -f "$RUN_ENV"
(
	umask 077
	{
		echo "# make run $$"
		for v in LISTEN_ADDR ADMIN_LISTEN_ADDR LOCAL_STRIPE_ADDR INTERNAL_API_TOKEN STRIPE_WEBHOOK_SECRET LOCAL_STRIPE_ACCOUNT; do
			if [ -n "${!v:-}" ]; then printf 'export %s=%q\n' "$v" "${!v}"; fi
		done
	} >"$RUN_ENV"
)

version="$(bin/stripe-payments version 2>/dev/null || echo unknown)"
if [ "$local_stripe" = 1 ]; then
	stripe_line="local Stripe     http://$LOCAL_STRIPE_ADDR   SIMULATED, test mode only (any sk_test_ key); connected account ${LOCAL_STRIPE_ACCOUNT:-acct_local_demo}
                   it sends signed webhooks to the service; state kept in ${LOCAL_STRIPE_STATE#"$ROOT/"}; docs/local-stripe.md
                   a real test key instead: STRIPE_API_KEY=sk_test_… STRIPE_API_BASE=https://api.stripe.com make run"
else
	stripe_line="Stripe           $STRIPE_API_BASE   (STRIPE_API_BASE set: no local Stripe)"
fi
cat <<EOF
== stripe-payments serve ($version)
  webhook          http://$LISTEN_ADDR/webhooks/stripe   (public listener: the webhook and /healthz; all the internet may reach)
  admin listener   http://$ADMIN_LISTEN_ADDR   (console /ops/, /internal/v1, /v1/purchases, /metrics, /readyz, /healthz)
  console          http://$ADMIN_LISTEN_ADDR/ops/   token: $INTERNAL_API_TOKEN
  $stripe_line
  webhook secret   $STRIPE_WEBHOOK_SECRET
  actions          ${ACTIONS_URL:-(ACTIONS_URL not set: actions stay in the outbox)}
  billing queue    ${BILLING_QUEUE_URL:-(BILLING_QUEUE_URL empty: collections run in process)}
  DynamoDB Local   $DYNAMODB_ENDPOINT   (tables kept under .dev/dynamodb)
  PostgreSQL 15    $DATABASE_URL   (data under .dev/pg)
  billing triggers ${BILLING_TRIGGERS_QUEUE_URL:-(off)}   (docs/billing.md "Triggers"; or POST /internal/v1/billing/triggers)
  walk-through     README.md "First hour" (it reads .dev/run.env); make reset wipes both stores and the local Stripe
Ctrl-C (SIGINT) or SIGTERM stops the service, the local Stripe and the local components this run started.
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
