"""Results of an environment check: `CheckResult`, `CheckReport` and `EnvCheckError`."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from openenv.core.errors import exception_message

Severity = Literal["error", "warning"]

#: Longest detail shown in a text table line (`to_dict()` keeps the full text).
_TABLE_DETAIL = 400


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    `severity` says what a failure means: `"error"` makes the report fail, `"warning"` is
    reported but does not. A skipped check (`skipped=True`) could not run (e.g. the episode never
    ended, so behaviour after `done` was not observed); it counts as passed and `detail` says why.
    """

    name: str
    passed: bool
    detail: str = ""
    severity: Severity = "error"
    skipped: bool = False

    @property
    def status(self) -> str:
        """One of `pass`, `fail`, `warn` (a failed warning) and `skip`."""
        if self.skipped:
            return "skip"
        if self.passed:
            return "pass"
        return "fail" if self.severity == "error" else "warn"

    @property
    def is_failure(self) -> bool:
        """True when this result makes the report fail."""
        return not self.passed and self.severity == "error"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "status": self.status,
            "severity": self.severity,
            "skipped": self.skipped,
            "detail": self.detail,
        }


@dataclass
class CheckReport:
    """Every check run against one environment (`kind="env"`) or server (`kind="server"`)."""

    target: str
    kind: str = "env"
    results: list[CheckResult] = field(default_factory=list)

    # -- building -------------------------------------------------------------------------

    def add(
        self,
        name: str,
        passed: bool,
        detail: str = "",
        severity: Severity = "error",
        *,
        skipped: bool = False,
    ) -> CheckResult:
        result = CheckResult(name, bool(passed), detail, severity, skipped)
        self.results.append(result)
        return result

    def passed(self, name: str, detail: str = "", severity: Severity = "error") -> CheckResult:
        return self.add(name, True, detail, severity)

    def failed(self, name: str, detail: str, severity: Severity = "error") -> CheckResult:
        return self.add(name, False, detail, severity)

    async def guard(self, name: str, work: Any, *args: Any) -> Any:
        """Run one check; if the checker itself hits an unexpected error, report it as a
        failure of that check instead of aborting the whole run."""
        try:
            result = work(*args)
            if inspect.isawaitable(result):
                result = await result
            return result
        except Exception as exc:
            self.failed(name, f"the check could not complete: {exception_message(exc)}")
            return None

    def skipped(self, name: str, reason: str, severity: Severity = "error") -> CheckResult:
        return self.add(name, True, f"skipped: {reason}", severity, skipped=True)

    # -- reading --------------------------------------------------------------------------

    @property
    def ok(self) -> bool:
        """True when no check of severity `error` failed (failed warnings are allowed)."""
        return not any(r.is_failure for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.is_failure]

    @property
    def warnings(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed and r.severity == "warning"]

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.results]

    def get(self, name: str) -> CheckResult | None:
        for result in self.results:
            if result.name == name:
                return result
        return None

    def __getitem__(self, name: str) -> CheckResult:
        result = self.get(name)
        if result is None:
            raise KeyError(f"No check named {name!r}; checks run: {', '.join(self.names)}")
        return result

    def __contains__(self, name: object) -> bool:
        return any(r.name == name for r in self.results)

    def __iter__(self) -> Iterator[CheckResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def summary(self) -> dict[str, int]:
        counts = {"pass": 0, "fail": 0, "warn": 0, "skip": 0}
        for result in self.results:
            counts[result.status] += 1
        return {
            "passed": counts["pass"],
            "failed": counts["fail"],
            "warnings": counts["warn"],
            "skipped": counts["skip"],
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what `openenv validate --json` prints)."""
        return {
            "target": self.target,
            "kind": self.kind,
            "ok": self.ok,
            "summary": self.summary(),
            "checks": [r.to_dict() for r in self.results],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def raise_for_failures(self) -> CheckReport:
        """Raise `EnvCheckError` listing every failed check; return the report otherwise."""
        if not self.ok:
            raise EnvCheckError(self)
        return self

    # -- rendering ------------------------------------------------------------------------

    def headline(self) -> str:
        s = self.summary()
        verdict = "OK" if self.ok else "FAILED"
        what = "check_env" if self.kind == "env" else "check_server"
        return (
            f"{what} {self.target}: {verdict} ({s['passed']} passed, {s['failed']} failed, "
            f"{s['warnings']} warnings, {s['skipped']} skipped)"
        )

    def __str__(self) -> str:
        width = max((len(r.name) for r in self.results), default=10)
        lines = [self.headline()]
        for r in self.results:
            detail = r.detail if len(r.detail) <= _TABLE_DETAIL else r.detail[:_TABLE_DETAIL] + "…"
            detail = detail.replace("\n", "\n" + " " * (width + 9))
            lines.append(f"  {r.status.upper():4}  {r.name:<{width}}  {detail}".rstrip())
        return "\n".join(lines)

    def __rich__(self) -> Any:
        """A rich Table (`rich.print(report)`)."""
        from rich.table import Table

        styles = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}
        table = Table(title=self.headline(), title_justify="left", show_lines=False)
        table.add_column("status", no_wrap=True)
        table.add_column("check", no_wrap=True)
        table.add_column("detail", overflow="fold")
        for r in self.results:
            style = styles[r.status]
            table.add_row(f"[{style}]{r.status.upper()}[/]", r.name, r.detail)
        return table


class EnvCheckError(AssertionError):
    """Raised by `check_env` / `check_server` (with `raise_on_failure`) when checks failed.

    The message lists every failed check, not only the first; `report` holds all results.
    """

    def __init__(self, report: CheckReport) -> None:
        self.report = report
        self.failures = report.failures
        what = "environment" if report.kind == "env" else "server"
        lines = [f"{len(self.failures)} {what} check(s) failed for {report.target}:"]
        for r in self.failures:
            detail = r.detail.replace("\n", "\n      ")
            lines.append(f"  - {r.name}: {detail}")
        if report.warnings:
            lines.append("Warnings:")
            for r in report.warnings:
                lines.append(f"  - {r.name}: {r.detail}")
        super().__init__("\n".join(lines))
