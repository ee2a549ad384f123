"""A pytest plugin (`-p repo_env.pytest_report --repo-env-report PATH`) that writes each test's
outcome to a JSON file, so results are read by node id rather than parsed from pytest's
terminal output (node ids of parametrized tests may hold spaces and dashes)."""

from __future__ import annotations

import json
from typing import Any

#: A test's outcome is the worst of its reports (setup, call, teardown, and any subtests).
_SEVERITY = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def pytest_addoption(parser: Any) -> None:
    parser.addoption(
        "--repo-env-report", default=None, help="write {node id: outcome} as JSON to this file"
    )


def pytest_configure(config: Any) -> None:
    path = config.getoption("repo_env_report")
    if path:
        config.pluginmanager.register(_Recorder(path), "repo-env-recorder")


class _Recorder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.outcomes: dict[str, str] = {}
        self.collection_errors: list[str] = []

    def _note(self, node_id: str, outcome: str) -> None:
        known = self.outcomes.get(node_id)
        if known is None or _SEVERITY[outcome] > _SEVERITY[known]:
            self.outcomes[node_id] = outcome

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.collection_errors.append(report.nodeid or ".")

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.passed:
            if report.when == "call":
                self._note(report.nodeid, "passed")
        elif report.skipped:
            # An expected failure that failed is as good as a pass for our purposes.
            self._note(report.nodeid, "passed" if hasattr(report, "wasxfail") else "skipped")
        else:
            self._note(report.nodeid, "failed" if report.when == "call" else "error")

    def pytest_sessionfinish(self, session: Any, exitstatus: Any) -> None:
        report = {
            "outcomes": self.outcomes,
            "collection_errors": self.collection_errors,
            "exit_status": int(exitstatus),
        }
        with open(self.path, "w", encoding="utf-8") as handle:
            json.dump(report, handle)
