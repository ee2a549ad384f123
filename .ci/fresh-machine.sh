#!/usr/bin/env bash
# Runs the two commands on the README's first screen, each in its own fresh Debian container that
# has only python3, python3-venv and pip (as a new bookworm machine does), from a copy of the
# committed repository. The commands are read from the README, so the check cannot drift from it.
# After the first (the quick start, which installs openenv and echo_env in .venv), the same
# container runs every other ```python and ```bash block of the README, in order, from the
# repository's root with .venv activated (python blocks with .venv/bin/python), so each block
# works after the README's own install. That reuses the quick start's venv: no other install.
#
# Markers, on the last non-blank line before a block's opening fence (HTML comments, not shown
# on GitHub):
#   <!-- not run: REASON -->             skipped (placeholders, Docker, a GPU, an overview of
#                                         commands, a server that runs until stopped); REASON
#                                         is required and printed
#   <!-- continues the block above -->   run as one program with the previous block (same
#                                         language), e.g. a snippet using the classes above it
# Every other python/bash block runs; blocks in other languages (```text, ```sh for docs' own
# shell sessions) are not code blocks of the README's and are left alone.
#
#   .ci/fresh-machine.sh            both commands, side by side (and the blocks after the first)
#   .ci/fresh-machine.sh 1          only the first (the quick start), then the blocks
#   .ci/fresh-machine.sh --commands print the two commands as read from the README, run nothing
#   .ci/fresh-machine.sh --blocks   print each README block's fate and the programs that would
#                                   run (as read from the README), run nothing
#
# Needs root, a running Docker engine and debootstrap. No registry serves images here, so the
# image is made locally with debootstrap and kept, tagged by a hash of what went into it. The
# containers share the host's network (Docker's bridge may not reach the package registries)
# and its TLS trust store (read-only, with SSL_CERT_FILE/SSL_CERT_DIR if set: where the host
# reaches the registries through a TLS-inspecting proxy, so must they), and have no Docker
# inside, so the image tests skip there. Logs: $FRESH_LOGS (default
# /tmp/openenv-fresh-machine). The second command's test run writes the node ids of the tests
# that passed to $FRESH_LOGS/tests-passed.txt (tests/support/passed_elsewhere.py), so that
# .ci/run's host run of the suite can leave them out.
set -euo pipefail
{ # Bash reads this block whole before running it, so editing the file meanwhile is harmless.
cd "$(dirname "$0")/.."

SUITE=bookworm
PACKAGES=python3,python3-venv,python3-pip,ca-certificates
LOGS=${FRESH_LOGS:-/tmp/openenv-fresh-machine}
TIMEOUT=${FRESH_TIMEOUT:-40m}
PASSED_LIST="$LOGS/tests-passed.txt"
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

# The README's other code blocks, as programs in folder $1 (NN-lineL.py / NN-lineL.sh, run in
# name order) and one line per block on stdout: what happens to it. The first bash block is the
# two commands above, run on their own.
extract_blocks() {
    awk -v out="$1" '
        function flush() {
            if (file != "") close(file)
            file = ""
        }
        /^```/ && !inside {
            lang = substr($0, 4)
            if (lang != "python" && lang != "bash") { skipping = 1; inside = 1; next }
            inside = 1; skipping = 0; n++
            where = "README block " n " (" lang ", line " NR ")"
            if (lang == "bash" && !seen_bash) {
                seen_bash = 1; skipping = 1
                print where ": the two commands above"
                next
            }
            if (last ~ /^<!-- *(not run|continues)/ && last !~ /^<!-- (not run: .+|continues the block above) -->$/) {
                print where ": malformed marker: " last > "/dev/stderr"
                failed = 1
            }
            if (last ~ /^<!-- not run: .+ -->$/) {
                reason = last; sub(/^<!-- not run: /, "", reason); sub(/ -->$/, "", reason)
                skipping = 1
                print where ": not run: " reason
                next
            }
            if (last ~ /^<!-- continues the block above -->$/) {
                if (file == "" || lang != file_lang) {
                    print where ": continues no runnable " lang " block" > "/dev/stderr"
                    failed = 1
                }
                print where ": runs with the block above (" file_name ")"
                next
            }
            flush()
            file_lang = lang
            file_name = sprintf("%02d-line%d.%s", n, NR, lang == "python" ? "py" : "sh")
            file = out "/" file_name
            printf "" > file
            print where ": runs (" file_name ")"
            next
        }
        /^```/ && inside { inside = 0; if (skipping) flush(); skipping = 0; last = $0; next }
        inside && !skipping { print >> file; next }
        inside { next }
        NF { last = $0 }
        END { flush(); exit failed }
    ' README.md
}

# Runs the blocks in /readme-blocks in the quick start's container, after the quick start.
# shellcheck disable=SC2016  # expanded in the container
RUN_BLOCKS='
cd /home/openenv
export VIRTUAL_ENV=/home/openenv/.venv PATH=/home/openenv/.venv/bin:$PATH
for block in /readme-blocks/*; do
    [ -e "$block" ] || continue
    echo "fresh-machine: README block ${block##*/}:"
    case "$block" in
        *.py) status=0; timeout 600 python "$block" || status=$? ;;
        *.sh) status=0; timeout 600 bash -euo pipefail "$block" || status=$? ;;
    esac
    if [ "$status" -ne 0 ]; then
        echo "fresh-machine: README block ${block##*/} exited $status" >&2
        exit "$status"
    fi
done'

case "${1:-}" in
    --commands) printf '%s\n' "${COMMANDS[@]}"; exit 0 ;;
    --blocks)
        listing=$(mktemp -d /tmp/openenv-fresh-blocks.XXXXXX)
        trap 'rm -rf "$listing"' EXIT
        extract_blocks "$listing"
        for block in "$listing"/*; do
            [ -e "$block" ] || continue
            printf '\n==> %s\n' "${block##*/}"
            cat "$block"
        done
        exit 0 ;;
    "" | 1 | 2) ;;
    *) echo "usage: $0 [1|2|--commands|--blocks]" >&2; exit 2 ;;
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
    local number=$1 command=$2 copy blocks name status=0 record=()
    copy=$(mktemp -d /tmp/openenv-fresh-copy.XXXXXX)
    blocks=$(mktemp -d /tmp/openenv-fresh-blocks.XXXXXX)
    name="openenv-fresh-$$-$number"
    git archive --format=tar "$REVISION" | tar -x -C "$copy"
    echo "fresh-machine: README command $number in a new $SUITE container ($IMAGE):"
    echo "    \$ $command"
    if [ "$number" = 1 ]; then
        # The README's other blocks, read from the copy (the committed README), after it.
        if ! (cd "$copy" && extract_blocks "$blocks") | sed 's/^/fresh-machine: /'; then
            echo "fresh-machine: FAILED: the README's block markers (see the header)" >&2
            rm -rf "$copy" "$blocks"
            return 1
        fi
        command="$command
$RUN_BLOCKS"
    else
        # Which tests passed here (never a listing from an earlier run).
        rm -f "$PASSED_LIST"
        # ... and where the time goes (the README's command is otherwise run as written).
        record=(-e OPENENV_TESTS_RECORD_PASSED=/home/openenv/.tests-passed.txt
            -e PYTEST_ADDOPTS=--durations=30)
    fi
    timeout "$TIMEOUT" docker run --rm --name "$name" --network host \
        "${TRUST[@]}" "${record[@]}" \
        -v "$copy:/home/openenv" -v "$blocks:/readme-blocks:ro" -w /home/openenv "$IMAGE" \
        bash -euo pipefail -c "$command" 2>&1 | tee "$LOGS/command-$number.log" || status=$?
    docker rm -f "$name" >/dev/null 2>&1 || true
    if [ -f "$copy/.tests-passed.txt" ]; then
        cp "$copy/.tests-passed.txt" "$PASSED_LIST"
        echo "fresh-machine: $(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))))' \
            "$PASSED_LIST") tests passed here: $PASSED_LIST"
    fi
    rm -rf "$copy" "$blocks"
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
if [ -z "${1:-}" ]; then
    # Both, at once: each has a container and a copy of its own, and the first (an install and
    # a few short episodes) mostly waits on the network while the second runs the suite. The
    # first's output follows the second's.
    run_in_fresh_container 1 "${COMMANDS[0]}" >"$LOGS/command-1.out" 2>&1 &
    first=$!
    run_in_fresh_container 2 "${COMMANDS[1]}" || failed=1
    wait "$first" || failed=1
    cat "$LOGS/command-1.out"
else
    run_in_fresh_container "$1" "${COMMANDS[$(($1 - 1))]}" || failed=1
fi
exit "$failed"
}
