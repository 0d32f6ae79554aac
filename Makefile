# stripe-payments — see docs/design.md §3 ("Running it"), docs/development.md and scripts/devstack.sh.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

# Go lives in /usr/local/go/bin on this kind of machine; keep it reachable
# when the caller's PATH lacks it.
export PATH := $(PATH):/usr/local/go/bin

GO        ?= go
BIN       := bin/stripe-payments
# Extra `go test` arguments for test/bench, e.g. make test TESTFLAGS='-run TestX -v'
TESTFLAGS ?=
export TESTFLAGS

.PHONY: help build image test check run reset lint bench bench-peer fuzz clean stack-up stack-down stack-status stack-env

## help: list the targets
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)

## build: compile bin/stripe-payments and bin/stripe-local (the local Stripe)
build:
	$(GO) build -o $(BIN) ./cmd/stripe-payments
	$(GO) build -o bin/stripe-local ./cmd/stripe-local

## image: the OCI image (Dockerfile, FROM scratch, ≤ 40 MB) built offline with podman: scripts/image.sh; docs/operations.md "The image"
image:
	scripts/image.sh build

## test: start the local stack if needed, go vet, gofmt check, go test -race; stop what it started
test:
	scripts/test.sh test

## check: the edit loop: gofmt check, go vet, go test without -race, without internal/app's end-to-end tests and the long runs (make test is the gate)
check:
	scripts/test.sh check

## run: local stack + migrate + the local Stripe + serve in the foreground (Ctrl-C stops all it started); README "First hour"
run:
	scripts/run.sh

## reset: stop the local stack and wipe both stores and the local Stripe (.dev/dynamodb, .dev/pg/data, .dev/stripe-local): the next make run starts empty
reset:
	scripts/devstack.sh reset

## lint: gofmt check + go vet
lint:
	scripts/test.sh lint

## bench: every benchmark once, against the local stack
bench:
	scripts/test.sh bench

## bench-peer: this service against stripe-sync-engine 0.48.5 on one durable Postgres, side by side, with the same run's ceiling (≈ 4 min)
bench-peer:
	scripts/bench-peer.sh

## fuzz: every fuzz target for a million executions, 1–3 min each (make test runs 50,000)
fuzz:
	scripts/devstack.sh up >/dev/null && eval "$$(scripts/devstack.sh env)" && scripts/fuzz.sh $${FUZZTIME:-1000000x}

## clean: remove build output
clean:
	rm -rf bin/

## stack-up / stack-down / stack-status: the local DynamoDB Local + PostgreSQL 15
stack-up:
	scripts/devstack.sh up

stack-down:
	scripts/devstack.sh down

stack-status:
	scripts/devstack.sh status

## stack-env: print the export lines for the local stack (eval "$(make -s stack-env)")
stack-env:
	@scripts/devstack.sh env
