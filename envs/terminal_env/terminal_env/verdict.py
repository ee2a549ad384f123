"""From a verifier's run to a reward, trusting only what the agent cannot forge.

The verifier gets a fresh random token on its stdin (never in its environment or argv, which
processes it starts from the workspace would inherit or could read). Native verifiers report
with lines the agent cannot print in advance::

    <token> check pass|fail <name>     one part of the breakdown
    <token> score <0..1>               the reward itself (else from the checks / exit status)

Reward: the `score` line if any (partial credit); else 1.0 when the verifier exits 0 and no
check failed, 0.0 otherwise. A Terminal-Bench verifier (`run-tests.sh` / pytest) passes with
exit status 0; the pytest summary (`-rA`) lines only fill in the breakdown.
"""

from __future__ import annotations

import math
import re
from typing import Any, Optional

from pydantic import BaseModel, Field

from openenv.sandbox import ExecResult, ExecStatus

from .tasks import Task

_PYTEST_LINE = re.compile(r"^(PASSED|FAILED|ERROR) (\S+)", re.MULTILINE)
_FOLDERS = re.compile(r"^.*/(?=[^/]*::)")  # a test id's folders (they vary by backend)
_OUTPUT_TAIL = 4000


class Verdict(BaseModel):
    """The reward and why: sent as the final observation's `metadata["verification"]`."""

    score: float = Field(ge=0.0, le=1.0)
    checks: dict[str, bool] = Field(default_factory=dict)
    exit_code: Optional[int] = None
    status: str = ""
    reason: str = ""
    output: str = Field(default="", description="The end of what the verifier printed.")


def _token_lines(text: str, token: str) -> list[list[str]]:
    lines = []
    for line in text.splitlines():
        if line.startswith(token + " "):
            lines.append(line[len(token) + 1 :].strip().split(" ", 2))
    return lines


def judge(task: Task, result: ExecResult, token: str) -> Verdict:
    """The verdict on a finished verifier run (`result.check()` has passed)."""
    visible = result.stdout + result.stderr
    # The token never appears in what the agent or the breakdown sees.
    output = visible.replace(token, "<token>")[-_OUTPUT_TAIL:]
    common: dict[str, Any] = {
        "exit_code": result.exit_code,
        "status": result.status.value,
        "output": output,
    }
    if result.status not in (ExecStatus.OK, ExecStatus.ERROR):
        reason = f"the verifier did not finish ({result.status.value}): {result.message}"
        return Verdict(score=0.0, reason=reason, **common)
    passed = result.exit_code == 0
    if task.layout == "terminal-bench":
        tests = {
            _FOLDERS.sub("", name): word == "PASSED"
            for word, name in _PYTEST_LINE.findall(result.stdout)
        }
        reason = "tests passed" if passed else f"run-tests exited {result.exit_code}"
        return Verdict(score=1.0 if passed else 0.0, checks=tests, reason=reason, **common)
    checks: dict[str, bool] = {}
    score: Optional[float] = None
    for parts in _token_lines(result.stdout, token):
        if parts[0] == "check" and len(parts) == 3 and parts[1] in ("pass", "fail"):
            checks[parts[2]] = parts[1] == "pass"
        elif parts[0] == "score" and len(parts) == 2:
            try:
                value = float(parts[1])
            except ValueError:
                continue
            if math.isfinite(value):
                score = min(1.0, max(0.0, value))
    if score is not None:
        return Verdict(score=score, checks=checks, reason="score reported", **common)
    failed = [name for name, ok in checks.items() if not ok]
    if checks:
        reason = f"{len(checks) - len(failed)} of {len(checks)} checks passed"
        if not passed and not failed:
            reason += f", but the verifier exited {result.exit_code}"
    else:
        reason = "the verifier passed" if passed else f"the verifier exited {result.exit_code}"
    score = 1.0 if passed and not failed else 0.0
    return Verdict(score=score, checks=checks, reason=reason, **common)
