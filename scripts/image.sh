#!/usr/bin/env bash
# The stripe-payments image (docs/operations.md "The image") with Debian's
# podman, offline: nothing is pulled from a registry.
#
# Usage: scripts/image.sh build | podman ARGS... | run ARGS... | ulimits
#
#   build    `make image`: build the static binary on this machine, put it
#            and the machine's CA bundle in a build context
#            (.dev/image/context), and build the image from ./Dockerfile
#            (FROM scratch). The last line printed is the image reference.
#   podman   podman with this checkout's storage and runtime (below), e.g.
#            scripts/image.sh podman images
#   run      podman run with the runtime and the ulimits this machine
#            needs, then ARGS, e.g.
#            scripts/image.sh run --rm --network host --env-file prod.env stripe-payments:latest
#   ulimits  print the --ulimit flags `run` adds.
#
# What works on this kind of machine (measured; podman 4.3, runc 1.1):
#   * runc: --runtime runc on every podman command (Debian's podman
#     prefers crun, which is not what runs containers here).
#   * explicit ulimits: podman asks for nofile 1048576, above the machine's
#     hard limit (20000 here), and runc then fails with "error setting
#     rlimit type 7: operation not permitted". `run` reads the hard limits
#     (ulimit -Hn, -Hu) and asks for half of each, at most 65536/16384.
#   * no systemd here: podman runs the image's HEALTHCHECK from a systemd
#     timer, so each start and removal logs "unable to get systemd
#     connection to add healthchecks". Harmless: `podman healthcheck run`
#     runs the check on demand. (--health-interval disable would silence
#     it, but podman 4.3 applies it only beside a --health-cmd that would
#     replace the image's own check.)
#   * storage in the checkout (.dev/podman) with the vfs driver: it works on
#     any file system and inside another container, where overlay may not;
#     the image is two small layers, so vfs's copy per container costs
#     little. Images and containers of a test run stay under .dev/ (make
#     reset leaves them; `scripts/image.sh podman system reset -f` empties
#     them).
#
# Environment:
#   IMAGE                  image reference to tag (localhost/stripe-payments:$VERSION,
#                          and :latest when IMAGE is not set)
#   VERSION                version stamped in the binary and the labels
#                          (git describe --tags --always --dirty)
#   IMAGE_CONTEXT          the build context directory (.dev/image/context)
#   PODMAN_DIR             podman's storage and state (.dev/podman)
#   PODMAN_STORAGE_DRIVER  storage driver (vfs)
#
# podman and runc (and ca-certificates) are installed with apt-get when
# missing, waiting for the apt lock of another install rather than failing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
DEV="$ROOT/.dev"
PODMAN_DIR="${PODMAN_DIR:-$DEV/podman}"
STORAGE_DRIVER="${PODMAN_STORAGE_DRIVER:-vfs}"
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
CONTEXT="${IMAGE_CONTEXT:-$DEV/image/context}"

log() { printf 'image: %s\n' "$*" >&2; }
die() {
	printf 'image: FATAL: %s\n' "$*" >&2
	exit 1
}

as_root() {
	if [ "$(id -u)" = 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo -n "$@"
	else
		die "need root (or passwordless sudo) to run: $*"
	fi
}

# apt_install waits up to 10 minutes for another apt or dpkg (devstack.sh,
# test.sh, unattended upgrades) to release its lock.
apt_install() {
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install by hand: $*"
	log "apt-get install $*"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq </dev/null >&2 ||
		die "apt-get update failed"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" </dev/null >&2 ||
		die "apt-get install $* failed"
}

ensure_tools() {
	local missing=()
	command -v podman >/dev/null 2>&1 || missing+=(podman)
	command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing+=(runc)
	[ -f "$CA_BUNDLE" ] || missing+=(ca-certificates)
	if [ "${#missing[@]}" -gt 0 ]; then
		apt_install "${missing[@]}"
	fi
}

# podman_cmd runs podman on this checkout's storage, with runc.
podman_cmd() {
	mkdir -p "$PODMAN_DIR"
	podman --root "$PODMAN_DIR/storage" --runroot "$PODMAN_DIR/run" --tmpdir "$PODMAN_DIR/tmp" \
		--storage-driver "$STORAGE_DRIVER" --runtime runc --events-backend file "$@"
}

# half of a hard limit, at most cap ("unlimited" counts as the cap).
half_of() {
	local hard=$1 cap=$2
	if [ "$hard" = unlimited ] || [ "$hard" -gt $((cap * 2)) ]; then
		echo "$cap"
	else
		echo $((hard / 2))
	fi
}

ulimit_flags() {
	local nofile nproc
	nofile="$(half_of "$(ulimit -Hn)" 65536)"
	nproc="$(half_of "$(ulimit -Hu)" 16384)"
	echo "--ulimit nofile=$nofile:$nofile --ulimit nproc=$nproc:$nproc"
}

build() {
	command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"
	command -v go >/dev/null 2>&1 || die "go not found on PATH"
	ensure_tools
	local version commit source image
	version="${VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo devel)}"
	commit="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
	source="https://$(cd "$ROOT" && go list -m)"
	image="${IMAGE:-localhost/stripe-payments:$version}"

	mkdir -p "$CONTEXT"
	rm -f "$CONTEXT/stripe-payments" "$CONTEXT/ca-certificates.crt"
	log "go build (static, trimmed) $version $commit"
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X main.version=$version -X main.commit=$commit" \
		-o "$CONTEXT/stripe-payments" ./cmd/stripe-payments)
	cp "$CA_BUNDLE" "$CONTEXT/ca-certificates.crt"
	chmod 0755 "$CONTEXT/stripe-payments"
	chmod 0644 "$CONTEXT/ca-certificates.crt"

	# --format docker: the OCI image format has no HEALTHCHECK.
	# --layers=false: no intermediate images left behind per build.
	local tags=(-t "$image")
	if [ -z "${IMAGE:-}" ]; then
		tags+=(-t localhost/stripe-payments:latest)
	fi
	log "podman build $image"
	podman_cmd build --quiet --layers=false --format docker --file "$ROOT/Dockerfile" \
		--build-arg VERSION="$version" --build-arg REVISION="$commit" --build-arg SOURCE="$source" \
		"${tags[@]}" "$CONTEXT" >&2
	# The image an earlier build tagged :latest (or the same version) is
	# left untagged: remove such images, which this checkout's storage
	# alone holds.
	podman_cmd image prune --force >/dev/null
	local size
	size="$(podman_cmd image inspect --format '{{.Size}}' "$image")"
	log "built $image: $((size / 1000 / 1000)) MB (storage $PODMAN_DIR, driver $STORAGE_DRIVER)"
	echo "$image"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
build)
	[ $# -eq 0 ] || die "build takes no arguments (IMAGE and VERSION come from the environment)"
	build
	;;
podman)
	ensure_tools
	podman_cmd "$@"
	;;
run)
	ensure_tools
	# shellcheck disable=SC2046 # the flags are words
	podman_cmd run $(ulimit_flags) "$@"
	;;
ulimits)
	ulimit_flags
	;;
*)
	echo "usage: $0 build | podman ARGS... | run ARGS... | ulimits" >&2
	exit 2
	;;
esac
