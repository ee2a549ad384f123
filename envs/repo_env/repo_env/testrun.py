"""Run a project's pytest suite in a sandbox and read each test's outcome."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from openenv.sandbox import ExecStatus, Sandbox, SandboxLimits, WorkspacePathError

#: A test run's ceilings: the shipped suites take well under a second; an agent's infinite loop
#: stops here (and is the agent's failure, not the sandbox's).
TEST_LIMITS = SandboxLimits(
    wall_time_s=15, cpu_time_s=15, memory_mb=1024, max_processes=64, max_output_bytes=2_000_000
)
#: How much of pytest's output a tool result carries (the end, where the failures are).
OUTPUT_TAIL_CHARS = 6000
_TIMING = re.compile(r" in \d+(?:\.\d+)?s\b( \(\d+:\d\d:\d\d\))?")


@dataclass(frozen=True)
class TestRun:
    """One pytest run: how the command ended, each test's outcome by node id, and its output."""

    __test__ = False  # not a pytest test class

    status: ExecStatus
    outcomes: dict[str, str] = field(default_factory=dict)
    collection_errors: list[str] = field(default_factory=list)
    output: str = ""

    def passed(self, node_id: str) -> bool:
        return self.outcomes.get(node_id) == "passed"

    def summary(self) -> dict[str, int]:
        counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
        for outcome in self.outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        return counts


def run_pytest(
    box: Sandbox, args: Sequence[str] = (), limits: SandboxLimits = TEST_LIMITS
) -> TestRun:
    """Run `pytest ARGS` in the box's workspace, isolated (`-I`: no current folder or PYTHON*
    variables on the path, so a `pytest.py` in the workspace cannot stand in for pytest), and
    writing no bytecode (`-B`): a `.pyc` is trusted by the source's mtime (whole seconds) and
    size, so an edit of the same size within a second of the last run would go unseen.

    Raises `SandboxError` only when the sandbox itself failed; a suite that times out or crashes
    is a run whose tests did not pass."""
    report = f".repo-env-report-{secrets.token_hex(8)}.json"
    argv = [
        box.python,
        "-I",
        "-B",
        "-m",
        "pytest",
        "-p",
        "repo_env.pytest_report",
        f"--repo-env-report={box.workspace}/{report}",
        "-p",
        "no:cacheprovider",
        "-q",
        "--no-header",
        "--tb=short",
        "--color=no",
        *args,
    ]
    # Only the plugins named here: the server's own pytest plugins stay out of the project's run.
    quiet = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    result = box.run(argv, limits=limits, env=quiet).check()
    data: dict = {}
    try:
        path = box.host_path(report)
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            path.unlink()
    except (OSError, ValueError, WorkspacePathError):
        data = {}
    outcomes = data.get("outcomes") if isinstance(data, dict) else None
    outcomes = outcomes if isinstance(outcomes, dict) else {}
    errors = data.get("collection_errors") if isinstance(data, dict) else None
    output = (result.stdout + result.stderr).replace(str(box.host_workspace), "/workspace")
    output = _TIMING.sub("", output)
    if result.message:
        output += f"\n[{result.status.value}] {result.message}\n"
    return TestRun(
        status=result.status,
        outcomes={str(k): str(v) for k, v in outcomes.items()},
        collection_errors=[str(e) for e in errors] if isinstance(errors, list) else [],
        output=output[-OUTPUT_TAIL_CHARS:],
    )
