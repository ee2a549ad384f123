#!/usr/bin/env bash
# Runs the two commands on the README's first screen, each in its own fresh Debian container that
# has only python3, python3-venv and pip (as a new bookworm machine does), from a copy of the
# committed repository. The commands are read from the README, so the check cannot drift from it.
#
#   .ci/fresh-machine.sh            both commands
#   .ci/fresh-machine.sh 1          only the first (the quick start)
#   .ci/fresh-machine.sh --commands print the two commands as read from the README, run nothing
#
# Needs root, a running Docker engine and debootstrap. No registry serves images here, so the
# image is made locally with debootstrap and kept, tagged by a hash of what went into it. The
# containers share the host's network (Docker's bridge may not reach the package registries)
# and its TLS trust store (read-only, with SSL_CERT_FILE/SSL_CERT_DIR if set: where the host
# reaches the registries through a TLS-inspecting proxy, so must they), and have no Docker
# inside, so the image tests skip there. Logs: $FRESH_LOGS (default
# /tmp/openenv-fresh-machine).
set -euo pipefail
{ # Bash reads this block whole before running it, so editing the file meanwhile is harmless.
cd "$(dirname "$0")/.."

SUITE=bookworm
PACKAGES=python3,python3-venv,python3-pip,ca-certificates
LOGS=${FRESH_LOGS:-/tmp/openenv-fresh-machine}
TIMEOUT=${FRESH_TIMEOUT:-40m}
mkdir -p "$LOGS"

# The README's first ```bash block: every line that is neither blank nor a comment.
mapfile -t COMMANDS < <(
    awk '/^```bash$/ {inside = 1; next} inside && /^```/ {exit} inside' README.md \
        | grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$'
)
if [ "${#COMMANDS[@]}" -ne 2 ]; then
    echo "fresh-machine: expected 2 commands in the README's first bash block, found" \
        "${#COMMANDS[@]}" >&2
    exit 1
fi
case "${1:-}" in
    --commands) printf '%s\n' "${COMMANDS[@]}"; exit 0 ;;
    "" | 1 | 2) ;;
    *) echo "usage: $0 [1|2|--commands]" >&2; exit 2 ;;
esac

# The image: a minimal Debian with only what a new machine brings for Python.
IMAGE="openenv-fresh-$SUITE:$(printf '%s\n' "$SUITE" "$PACKAGES" | sha256sum | cut -c1-12)"
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "fresh-machine: making $IMAGE with debootstrap (a few minutes, once)"
    ROOTFS=$(mktemp -d /tmp/openenv-fresh-rootfs.XXXXXX)
    trap 'rm -rf "$ROOTFS"' EXIT
    if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" \
        >"$LOGS/debootstrap.log" 2>&1; then
        tail -20 "$LOGS/debootstrap.log" >&2
        echo "fresh-machine: debootstrap failed (full log: $LOGS/debootstrap.log)" >&2
        exit 1
    fi
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/usr/share/doc "$ROOTFS"/usr/share/man
    tar -C "$ROOTFS" -c . | docker import -c 'ENV LANG=C.UTF-8' - "$IMAGE" >/dev/null
    rm -rf "$ROOTFS"
    trap - EXIT
fi

# The repository as committed (with uncommitted changes to tracked files, for a local run),
# never the working tree's .venv or caches.
REVISION=$(git stash create)
REVISION=${REVISION:-HEAD}

# The host's trust store, if it has one where Debian keeps it.
TRUST=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    TRUST=(-v /etc/ssl/certs:/etc/ssl/certs:ro -e SSL_CERT_FILE -e SSL_CERT_DIR)
fi

run_in_fresh_container() {
    local number=$1 command=$2 copy name status=0
    copy=$(mktemp -d /tmp/openenv-fresh-copy.XXXXXX)
    name="openenv-fresh-$$-$number"
    git archive --format=tar "$REVISION" | tar -x -C "$copy"
    echo "fresh-machine: README command $number in a new $SUITE container ($IMAGE):"
    echo "    \$ $command"
    timeout "$TIMEOUT" docker run --rm --name "$name" --network host \
        "${TRUST[@]}" \
        -v "$copy:/home/openenv" -w /home/openenv "$IMAGE" \
        bash -euo pipefail -c "$command" 2>&1 | tee "$LOGS/command-$number.log" || status=$?
    docker rm -f "$name" >/dev/null 2>&1 || true
    rm -rf "$copy"
    if [ "$status" -eq 124 ]; then
        echo "fresh-machine: FAILED: README command $number did not finish within $TIMEOUT" >&2
    fi
    if [ "$status" -ne 0 ]; then
        echo "fresh-machine: FAILED: README command $number exited $status on a fresh $SUITE" \
            "machine (full log: $LOGS/command-$number.log)" >&2
        return 1
    fi
    echo "fresh-machine: README command $number passed (full log: $LOGS/command-$number.log)"
}

failed=0
for number in 1 2; do
    if [ -z "${1:-}" ] || [ "$1" = "$number" ]; then
        run_in_fresh_container "$number" "${COMMANDS[$((number - 1))]}" || failed=1
    fi
done
exit "$failed"
}
