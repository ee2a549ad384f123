"""Run each test of the default suite once across CI's two runs of it.

`.ci/run` runs the README's test command on a fresh machine (a container with only Python, as
a new user has) and then the suite on the host, which has what that machine lacks: Docker,
bubblewrap, git, Chromium, the real model and the training extra. Running again on the host a
test that already passed on the fresh machine proves nothing new and costs minutes of CI's
budget, so the host's run leaves those out and runs the rest: what skipped, failed or did not
run there.

- ``OPENENV_TESTS_RECORD_PASSED=FILE``: at the end of the run, write to FILE (a JSON list:
  parametrized ids may hold spaces and newlines) the node id of every test that passed (setup,
  call and teardown).
- ``OPENENV_TESTS_PASSED_IN=FILE``: deselect the tests FILE lists. A missing FILE deselects
  nothing and says so, so a fresh-machine run that never got to its tests costs time, not
  coverage.

Both unset (any run but CI's), this plugin does nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

RECORD_ENV = "OPENENV_TESTS_RECORD_PASSED"
SKIP_ENV = "OPENENV_TESTS_PASSED_IN"

_outcomes: dict[str, bool] = {}
_summary: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A test passed if its call passed and none of its phases failed."""
    if not os.environ.get(RECORD_ENV):
        return
    if report.failed:
        _outcomes[report.nodeid] = False
    elif report.when == "call" and report.passed and not hasattr(report, "wasxfail"):
        _outcomes.setdefault(report.nodeid, True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    record = os.environ.get(RECORD_ENV)
    if not record:
        return
    passed = sorted(nodeid for nodeid, ok in _outcomes.items() if ok)
    Path(record).write_text(json.dumps(passed, indent=0), encoding="utf-8")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    listing = os.environ.get(SKIP_ENV)
    if not listing:
        return
    path = Path(listing)
    if not path.is_file():
        _summary.append(f"{SKIP_ENV}={listing} does not exist: every selected test runs here")
        return
    passed = set(json.loads(path.read_text(encoding="utf-8")))
    kept = [item for item in items if item.nodeid not in passed]
    left_out = [item for item in items if item.nodeid in passed]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
    _summary.append(
        f"{len(left_out)} tests left out: they passed in the README's run on a fresh machine"
        f" ({listing}); {len(kept)} run here"
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _summary:
        terminalreporter.write_line(line)
