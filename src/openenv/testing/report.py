"""The one result type of every check: `CheckResult`s in a `CheckReport`, `EnvCheckError`.

`check_env`, `check_server` and `openenv validate` all fill a `CheckReport`; its JSON is
OpenEnv's `validate --json` document (`criteria` with `id`, `description`, `passed`,
`required`, `details`), so one reader handles all three.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

Severity = Literal["error", "warning"]

#: What was checked: a class in-process, a running server, an environment folder.
Kind = Literal["environment_class", "running_environment", "local_environment"]

#: Longest detail shown in a text table line (`to_dict()` keeps the full text).
_TABLE_DETAIL = 400


@dataclass
class CheckResult:
    """The outcome of one check.

    A failed check of severity `"error"` fails the report; a failed `"warning"` does not. A
    skipped check could not run (e.g. no episode ended); it counts as passed and `detail` says
    why. `expected` / `actual` are set where a value was compared.
    """

    name: str
    passed: bool
    detail: str = ""
    severity: Severity = "error"
    skipped: bool = False
    description: str = ""
    expected: Any = None
    actual: Any = None

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
        return not self.passed and self.severity == "error"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.name,
            "description": self.description or self.name,
            "passed": self.passed,
            "required": self.severity == "error",
            "status": self.status,
        }
        for key, value in (("details", self.detail), ("expected", self.expected)):
            if value not in (None, ""):
                data[key] = value
        if self.actual is not None:
            data["actual"] = self.actual
        if self.skipped:
            data["skipped"] = True
        return data


@dataclass
class CheckReport:
    """Every check run against one environment class, server or folder."""

    target: str
    kind: Kind = "environment_class"
    results: list[CheckResult] = field(default_factory=list)
    environment: Optional[str] = None
    mode: Optional[str] = None
    standard_version: str = "unknown"
    standard_profile: str = "openenv-http/unknown"
    deployment_modes: Optional[dict[str, Any]] = None
    #: Set when nothing answered at the URL: the one thing the user needs to hear.
    unreachable: Optional[str] = None

    def add(
        self,
        name: str,
        passed: bool,
        detail: str = "",
        severity: Severity = "error",
        *,
        skipped: bool = False,
        description: str = "",
        expected: Any = None,
        actual: Any = None,
    ) -> CheckResult:
        result = CheckResult(
            name, bool(passed), detail, severity, skipped, description, expected, actual
        )
        self.results.append(result)
        return result

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
        return next((r for r in self.results if r.name == name), None)

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

    def summary(self) -> dict[str, Any]:
        required = [r for r in self.results if r.severity == "error"]
        return {
            "passed_count": sum(r.passed for r in self.results),
            "total_count": len(self.results),
            "failed_criteria": [r.name for r in self.results if not r.passed],
            "required_passed_count": sum(r.passed for r in required),
            "required_total_count": len(required),
        }

    def to_dict(self) -> dict[str, Any]:
        """OpenEnv's `validate --json` document (plus `mode` for a folder that was run)."""
        data: dict[str, Any] = {"target": self.target}
        if self.kind != "running_environment":
            data["environment"] = self.environment
        data.update(
            validation_type=self.kind,
            standard_version=self.standard_version,
            standard_profile=self.standard_profile,
        )
        if self.kind == "running_environment" or self.mode is not None:
            data["mode"] = self.mode
        data.update(
            passed=self.ok,
            summary=self.summary(),
            criteria=[r.to_dict() for r in self.results],
        )
        if self.kind == "local_environment":
            data["issues"] = [
                f"{r.name}: {r.detail or r.description}" for r in self.results if not r.passed
            ]
            data["deployment_modes"] = self.deployment_modes or {}
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    def raise_for_failures(self) -> CheckReport:
        """Raise `EnvCheckError` listing every failed check; return the report otherwise."""
        if not self.ok:
            raise EnvCheckError(self)
        return self

    # -- rendering ------------------------------------------------------------------------

    def headline(self) -> str:
        s = self.summary()
        verdict = "OK" if self.ok else "FAILED"
        failed = len(self.failures)
        skipped = sum(r.skipped for r in self.results)
        return (
            f"{self.environment or self.target}: {verdict} ({s['passed_count'] - skipped} passed, "
            f"{failed} failed, {len(self.warnings)} warnings, {skipped} skipped)"
        )

    def __str__(self) -> str:
        width = max((len(r.name) for r in self.results), default=10)
        lines = [self.headline()]
        for r in self.results:
            detail = r.detail if len(r.detail) <= _TABLE_DETAIL else r.detail[:_TABLE_DETAIL] + "…"
            detail = detail.replace("\n", "\n" + " " * (width + 9))
            lines.append(f"  {r.status.upper():4}  {r.name:<{width}}  {detail}".rstrip())
        return "\n".join(lines)

    def table(self, verbose: bool = True) -> Any:
        """A rich Table; without `verbose`, passing checks show what was checked, not details."""
        from rich.markup import escape
        from rich.table import Table

        styles = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}
        table = Table(title=escape(self.headline()), title_justify="left")
        table.add_column("status", no_wrap=True)
        table.add_column("check", no_wrap=True)
        table.add_column("what was checked / what is wrong", overflow="fold")
        for r in self.results:
            if r.status == "pass" and not (verbose and r.detail):
                text = f"[dim]{escape(r.description or r.name)}[/]"
            else:
                text = escape(r.detail or r.description)
            table.add_row(f"[{styles[r.status]}]{r.status.upper()}[/]", escape(r.name), text)
        return table

    def __rich__(self) -> Any:
        return self.table()


class EnvCheckError(AssertionError):
    """Raised by `check_env` / `check_server` (with `raise_on_failure`) when checks failed.

    The message lists every failed check, not only the first; `report` holds all results.
    """

    def __init__(self, report: CheckReport) -> None:
        self.report = report
        self.failures = report.failures
        lines = [f"{len(self.failures)} check(s) failed for {report.target}:"]
        for r in self.failures:
            detail = r.detail.replace("\n", "\n      ")
            lines.append(f"  - {r.name}: {detail}")
        if report.warnings:
            lines.append("Warnings:")
            lines.extend(f"  - {r.name}: {r.detail}" for r in report.warnings)
        super().__init__("\n".join(lines))
