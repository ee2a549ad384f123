# Helpers for a task's verify.sh:   . "$OPENENV_CHECK"
#
#   check "name" COMMAND [ARGS...]   one check: passes when COMMAND exits 0 (its output hidden)
#   score 0.5                        report the reward directly instead of counting checks
#   finish                           exit 0 when every check passed, else 1 (reward 1 or 0)
#   finish --partial                 reward = the fraction of checks passed
#
# The first line of stdin is the environment's secret token: only lines that start with it
# count, so nothing the agent left in the workspace can print a passing verdict.
IFS= read -r __openenv_token || __openenv_token=""
exec </dev/null
__openenv_failed=0
__openenv_checks=0
__openenv_passed=0

check() {
    local name=$1
    shift
    __openenv_checks=$((__openenv_checks + 1))
    if "$@" >/dev/null 2>&1; then
        __openenv_passed=$((__openenv_passed + 1))
        printf '%s check pass %s\n' "$__openenv_token" "$name"
    else
        printf '%s check fail %s\n' "$__openenv_token" "$name"
        __openenv_failed=1
    fi
}

score() {
    printf '%s score %s\n' "$__openenv_token" "$1"
}

finish() {
    if [ "${1:-}" = "--partial" ] && [ "$__openenv_checks" -gt 0 ]; then
        score "$(awk "BEGIN { print $__openenv_passed / $__openenv_checks }")"
    fi
    exit "$__openenv_failed"
}
