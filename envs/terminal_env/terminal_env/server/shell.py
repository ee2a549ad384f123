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

# stdin: marker, directory, saved `export -p`, command, each ended by NUL (not argv, where
# long commands or many exports would hit the kernel's limit). Then stdin is /dev/null.
_WRAPPER = r"""
IFS= read -r -d '' __openenv_marker
IFS= read -r -d '' __openenv_dir
IFS= read -r -d '' __openenv_exports
IFS= read -r -d '' __openenv_command
exec </dev/null
__openenv_record() { printf '\0%s\0%s\0' "$__openenv_marker" "$PWD"; export -p; }
cd -- "$__openenv_dir" 2>/dev/null || cd -- "$HOME"
eval "$__openenv_exports" 2>/dev/null
unset __openenv_dir __openenv_exports
trap __openenv_record EXIT
exec 2>&1
eval "$__openenv_command"
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
    request = "\0".join((marker, state.cwd, state.exports, command)) + "\0"
    result = box.run(["bash", "-c", _WRAPPER], stdin=request.encode(), limits=limits)
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
