"""One bash per command, with the working directory and exported variables carried over.

Each command is its own sandboxed bash (so limits, and the death of background processes,
apply per command). A wrapper restores the previous directory and exported variables, runs the
command with stderr joined to stdout, and on exit prints a record of the new ones after a
random marker. A command that forges or swallows the record only changes its own shell state;
when no record arrives (killed, timed out, output cut) the previous state stays.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from openenv.sandbox import ExecResult, Sandbox, SandboxLimits

# $1 marker, $2 directory, $3 saved `export -p`, $4 the command.
_WRAPPER = r"""
__openenv_marker=$1
__openenv_record() { printf '\0%s\0%s\0' "$__openenv_marker" "$PWD"; export -p; }
cd -- "$2" 2>/dev/null || cd -- "$HOME"
eval "$3" 2>/dev/null
trap __openenv_record EXIT
exec 2>&1
eval "$4"
"""
_NOT_CARRIED = ("declare -x PWD=", "declare -x OLDPWD", "declare -x SHLVL=", "declare -x _=")


@dataclass
class ShellState:
    cwd: str
    exports: str = ""


@dataclass
class ShellResult:
    result: ExecResult
    output: str
    state: ShellState = field(default_factory=lambda: ShellState(cwd=""))


def run_command(
    box: Sandbox, command: str, state: ShellState, limits: SandboxLimits
) -> ShellResult:
    """Run `command` from `state`; the result carries the state after it."""
    marker = secrets.token_hex(12)
    argv = ["bash", "-c", _WRAPPER, "openenv-shell", marker, state.cwd, state.exports, command]
    result = box.run(argv, limits=limits)
    output, sep, record = result.stdout.rpartition(f"\0{marker}\0")
    if not sep:
        return ShellResult(result=result, output=result.stdout + result.stderr, state=state)
    cwd, _, exports = record.partition("\0")
    kept = "\n".join(line for line in exports.splitlines() if not line.startswith(_NOT_CARRIED))
    return ShellResult(
        result=result,
        output=output + result.stderr,
        state=ShellState(cwd=cwd or state.cwd, exports=kept),
    )
