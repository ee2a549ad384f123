"""What `openenv validate` checks, usable without the CLI.

An environment folder is checked for what deployment needs (manifest, pyproject entry point,
package layout, `main()` guard, Dockerfile, README front matter), then served and checked over
the wire; a running server is checked for OpenEnv's endpoint criteria plus real episodes
(`check_server`). Both give a `ValidationReport` whose JSON matches OpenEnv's `validate --json`.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Optional

import httpx

from openenv.core.errors import exception_message
from openenv.core.manifest import MANIFEST_NAME, EnvManifest, ManifestError, split_front_matter
from openenv.core.manifest import load_manifest as _load_manifest

from ._jsonutil import short
from .env_checker import DEFAULT_STEPS
from .live_server import free_port
from .report import CheckReport
from .server_checker import check_server

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

LOCAL = "local_environment"
RUNNING = "running_environment"

#: Dependency names that provide the openenv runtime (`openenv-core` is OpenEnv's legacy name).
OPENENV_DISTRIBUTIONS = frozenset({"openenv", "openenv-core"})

#: OpenEnv's runtime criteria (same ids), in the order they are checked.
ENDPOINT_CRITERIA = {
    "openapi_version_available": "GET /openapi.json has a string info.version",
    "health_endpoint": "GET /health answers 200 with status healthy",
    "metadata_endpoint": "GET /metadata answers 200 with a string name and description",
    "schema_endpoint": "GET /schema answers 200 with action, observation and state schemas",
    "mcp_endpoint": "POST /mcp answers JSON-RPC 2.0",
    "mode_endpoint_consistency": (
        "simulation mode serves /reset, /step and /state over HTTP; production mode none of them"
    ),
}

#: check_server checks that repeat one of OpenEnv's endpoint criteria exactly.
_DUPLICATE_CHECKS = frozenset({"health"})

_CHECK_DESCRIPTIONS = {
    "metadata": "GET /metadata is a valid EnvironmentMetadata",
    "schema": "each schema of GET /schema is a valid JSON Schema",
    "openapi_version": "the OpenAPI info.version is a 1.x protocol version",
    "mcp_tools": "MCP tools/list answers the same over POST /mcp and /ws (MCP environments)",
    "sample_actions": "sample actions can be built that match the action schema",
    "ws_reset": "reset(seed) over the WebSocket /ws answers an observation",
    "ws_step": "step(action) over /ws answers every sample action",
    "ws_state": "state over /ws is a State with step_count",
    "determinism": "the same seed and actions give the same episode",
    "step_after_done": "a step after done is refused or stays done",
    "invalid_action_unknown_field": "an action with an unknown field is rejected (/ws and HTTP)",
    "invalid_action_wrong_type": "an action with a wrongly typed field is rejected",
    "invalid_action_missing_field": "an action without a required field is rejected",
    "http_session": "an HTTP session (X-OpenEnv-Session-Id) runs a full episode and closes",
    "transport_consistency": "the same seeded episode is identical over /ws and HTTP",
    "http_stateless": "POST /reset without a session answers, as in OpenEnv",
    "observation_schema": "observations on the wire match the published observation schema",
    "state_schema": "states on the wire match the published state schema",
    "concurrent_sessions": "two concurrent sessions do not share state",
    "sessions_released": "every session the checker opened was released",
}

_DIST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


# -- reports ---------------------------------------------------------------------------------


@dataclass
class Criterion:
    """One validation criterion. A failed criterion with `required=False` is a warning."""

    id: str
    description: str
    passed: bool
    required: bool = True
    details: str = ""
    expected: Any = None
    actual: Any = None
    skipped: bool = False

    @property
    def status(self) -> str:
        """One of `pass`, `fail`, `warn` (a failed optional criterion) and `skip`."""
        if self.skipped:
            return "skip"
        if self.passed:
            return "pass"
        return "fail" if self.required else "warn"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "description": self.description,
            "passed": self.passed,
            "required": self.required,
        }
        if self.details:
            data["details"] = self.details
        if self.expected is not None:
            data["expected"] = self.expected
        if self.actual is not None:
            data["actual"] = self.actual
        if self.skipped:
            data["skipped"] = True
        return data


@dataclass
class ValidationReport:
    """Every criterion checked for one folder (`local_environment`) or URL
    (`running_environment`)."""

    target: str
    validation_type: str
    standard_version: str
    standard_profile: str
    criteria: list[Criterion] = field(default_factory=list)
    environment: Optional[str] = None
    mode: Optional[str] = None
    deployment_modes: Optional[dict[str, Any]] = None
    #: Set when nothing answered at the URL: the one thing the user needs to hear.
    unreachable: Optional[str] = None

    def add(self, criterion: Criterion) -> Criterion:
        self.criteria.append(criterion)
        return criterion

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.criteria if c.required)

    @property
    def failures(self) -> list[Criterion]:
        return [c for c in self.criteria if c.required and not c.passed]

    @property
    def warnings(self) -> list[Criterion]:
        return [c for c in self.criteria if not c.required and not c.passed]

    @property
    def ids(self) -> list[str]:
        return [c.id for c in self.criteria]

    def get(self, criterion_id: str) -> Optional[Criterion]:
        return next((c for c in self.criteria if c.id == criterion_id), None)

    def __getitem__(self, criterion_id: str) -> Criterion:
        found = self.get(criterion_id)
        if found is None:
            raise KeyError(f"no criterion {criterion_id!r}; checked: {', '.join(self.ids)}")
        return found

    def summary(self) -> dict[str, Any]:
        required = [c for c in self.criteria if c.required]
        return {
            "passed_count": sum(c.passed for c in self.criteria),
            "total_count": len(self.criteria),
            "failed_criteria": [c.id for c in self.criteria if not c.passed],
            "required_passed_count": sum(c.passed for c in required),
            "required_total_count": len(required),
        }

    def to_dict(self) -> dict[str, Any]:
        """The `--json` document (OpenEnv's keys, plus `mode` for a folder that was run)."""
        data: dict[str, Any] = {"target": self.target}
        if self.validation_type == LOCAL:
            data["environment"] = self.environment
        data.update(
            validation_type=self.validation_type,
            standard_version=self.standard_version,
            standard_profile=self.standard_profile,
        )
        if self.validation_type == RUNNING or self.mode is not None:
            data["mode"] = self.mode
        data.update(
            passed=self.passed,
            summary=self.summary(),
            criteria=[c.to_dict() for c in self.criteria],
        )
        if self.validation_type == LOCAL:
            data["issues"] = [
                f"{c.id}: {c.details or c.description}" for c in self.criteria if not c.passed
            ]
            data["deployment_modes"] = self.deployment_modes or {}
        return data

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)


# -- a running server --------------------------------------------------------------------------


def _request(http: httpx.Client, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    """(status, JSON body or text); raises httpx errors for the caller to report."""
    response = http.request(method, path, **kwargs)
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, response.text


def _endpoint(
    report: ValidationReport,
    criterion_id: str,
    expected: Any,
    probe: Callable[[], tuple[bool, Any, str]],
) -> None:
    """Run one endpoint probe `() -> (passed, actual, details)`; a transport error fails it."""
    try:
        passed, actual, details = probe()
    except httpx.HTTPError as exc:
        passed, actual, details = False, None, f"request failed: {exception_message(exc)}"
    description = ENDPOINT_CRITERIA[criterion_id]
    report.add(Criterion(criterion_id, description, passed, True, details, expected, actual))


def _endpoint_criteria(report: ValidationReport, http: httpx.Client) -> None:
    """OpenEnv's six runtime criteria, with its ids."""
    openapi: dict[str, Any] = {}

    def openapi_probe() -> tuple[bool, Any, str]:
        status, body = _request(http, "GET", "/openapi.json")
        if status == 200 and isinstance(body, dict):
            openapi.update(body)
        info = body.get("info") if isinstance(body, dict) else None
        version = info.get("version") if isinstance(info, dict) else None
        ok = status == 200 and isinstance(version, str)
        details = f"info.version is {version!r}" if ok else f"GET /openapi.json -> {status}"
        if not ok:
            details += f" {short(body, 200)}; FastAPI apps publish info.version"
        return ok, {"status_code": status, "version": version}, details

    def health_probe() -> tuple[bool, Any, str]:
        status, body = _request(http, "GET", "/health")
        state = body.get("status") if isinstance(body, dict) else None
        ok = status == 200 and state == "healthy"
        details = f"GET /health -> {status} {short(body, 200)}"
        return ok, {"status_code": status, "status": state}, details

    def metadata_probe() -> tuple[bool, Any, str]:
        status, body = _request(http, "GET", "/metadata")
        name = body.get("name") if isinstance(body, dict) else None
        description = body.get("description") if isinstance(body, dict) else None
        ok = status == 200 and isinstance(name, str) and isinstance(description, str)
        details = (
            f"{name}: {short(description, 100)}"
            if ok
            else f"GET /metadata -> {status} {short(body, 200)}; name and description must be "
            "strings"
        )
        return ok, {"status_code": status, "name": name, "description": description}, details

    def schema_probe() -> tuple[bool, Any, str]:
        status, body = _request(http, "GET", "/schema")
        kinds = {
            key: type(body.get(key)).__name__ if isinstance(body, dict) else None
            for key in ("action", "observation", "state")
        }
        ok = status == 200 and all(kind == "dict" for kind in kinds.values())
        missing = [key for key, kind in kinds.items() if kind != "dict"]
        details = (
            "GET /schema has action, observation and state schemas"
            if ok
            else f"GET /schema -> {status}; not an object: {', '.join(missing) or '(body)'}"
        )
        return ok, {"status_code": status, **kinds}, details

    def mcp_probe() -> tuple[bool, Any, str]:
        status, body = _request(http, "POST", "/mcp", json={})
        version = body.get("jsonrpc") if isinstance(body, dict) else None
        ok = status == 200 and version == "2.0"
        details = (
            "POST /mcp answers JSON-RPC 2.0"
            if ok
            else f"POST /mcp -> {status} {short(body, 200)}; expected a JSON-RPC 2.0 reply"
        )
        return ok, {"status_code": status, "jsonrpc": version}, details

    _endpoint(
        report,
        "openapi_version_available",
        {"status_code": 200, "version": "a string"},
        openapi_probe,
    )
    _endpoint(
        report,
        "health_endpoint",
        {"status_code": 200, "status": "healthy"},
        health_probe,
    )
    _endpoint(
        report,
        "metadata_endpoint",
        {"status_code": 200, "name": "a string", "description": "a string"},
        metadata_probe,
    )
    _endpoint(
        report,
        "schema_endpoint",
        {"status_code": 200, "action": "dict", "observation": "dict", "state": "dict"},
        schema_probe,
    )
    _endpoint(
        report,
        "mcp_endpoint",
        {"status_code": 200, "jsonrpc": "2.0"},
        mcp_probe,
    )

    version = (openapi.get("info") or {}).get("version")
    # A running server's standard is its protocol version; a folder's stays "local" (OpenEnv's).
    if isinstance(version, str) and report.validation_type == RUNNING:
        report.standard_version = version
        major = version.split(".", 1)[0]
        report.standard_profile = f"openenv-http/{major}.x"
    report.mode, criterion = mode_criterion(openapi)
    report.add(criterion)


def mode_criterion(openapi: dict[str, Any]) -> tuple[Optional[str], Criterion]:
    """The server's mode read from its OpenAPI paths, and whether its HTTP routes agree:
    simulation has /reset, /step and /state; production has none of them."""
    description = ENDPOINT_CRITERIA["mode_endpoint_consistency"]
    paths = openapi.get("paths")
    if not isinstance(paths, dict):
        details = "no OpenAPI paths to read the mode from (see openapi_version_available)"
        return None, Criterion("mode_endpoint_consistency", description, False, details=details)
    present = sorted(p for p in ("/reset", "/step", "/state") if p in paths)
    mode = "simulation" if "/reset" in paths else "production"
    expected = ["/reset", "/state", "/step"] if mode == "simulation" else []
    ok = present == expected
    details = f"{mode} mode: HTTP routes {present or 'none'}"
    if not ok:
        details += f"; expected {expected or 'none'} (a partial set confuses clients)"
    criterion = Criterion(
        "mode_endpoint_consistency",
        description,
        ok,
        details=details,
        expected={"mode": mode, "paths": expected},
        actual={"mode": mode, "paths": present},
    )
    return mode, criterion


def _episode_criteria(report: ValidationReport, checks: CheckReport) -> None:
    """Each `check_server` check as a criterion: errors are required, warnings are not."""
    for result in checks:
        if result.name in _DUPLICATE_CHECKS:
            continue
        existing = report.get(result.name)
        if existing is not None:  # one id per criterion: merge a check reported twice
            existing.passed = existing.passed and result.passed
            existing.skipped = existing.skipped and result.skipped
            existing.details = "; ".join(d for d in (existing.details, result.detail) if d)
            continue
        report.add(
            Criterion(
                result.name,
                _CHECK_DESCRIPTIONS.get(result.name, f"check_server: {result.name}"),
                result.passed,
                result.severity == "error",
                result.detail,
                skipped=result.skipped,
            )
        )


def _run_runtime_criteria(
    report: ValidationReport, base_url: str, timeout_s: float, episodes: bool, steps: int
) -> None:
    with httpx.Client(base_url=base_url, timeout=timeout_s, follow_redirects=True) as http:
        try:
            http.get("/health")
        except httpx.TransportError as exc:
            reason = exception_message(exc)
            report.unreachable = f"nothing answers at {base_url} ({reason})"
            for criterion_id, description in ENDPOINT_CRITERIA.items():
                report.add(Criterion(criterion_id, description, False, details=report.unreachable))
            return
        _endpoint_criteria(report, http)
    if not episodes:
        return
    try:
        checks = check_server(base_url, steps=steps, timeout_s=timeout_s, raise_on_failure=False)
    except Exception as exc:  # the checker must not hide the endpoint criteria
        report.add(
            Criterion(
                "episode_checks",
                "check_server ran its episode checks",
                False,
                details=f"check_server could not run: {exception_message(exc)}",
            )
        )
        return
    _episode_criteria(report, checks)


def normalize_url(url: str) -> str:
    """`http(s)://host[:port][/prefix]` without a trailing slash; ValueError otherwise."""
    url = url.strip()
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError(f"{url!r} is not an http(s) URL")
    return url.rstrip("/")


def validate_running_environment(
    url: str, timeout_s: float = 5.0, *, episodes: bool = True, steps: int = DEFAULT_STEPS
) -> ValidationReport:
    """Check a running server: OpenEnv's endpoint criteria, then (with `episodes`) every
    `check_server` check as a criterion. `timeout_s` bounds each request."""
    base = normalize_url(url)
    report = ValidationReport(
        target=base,
        validation_type=RUNNING,
        standard_version="unknown",
        standard_profile="openenv-http/unknown",
    )
    _run_runtime_criteria(report, base, timeout_s, episodes, steps)
    return report


# -- an environment folder: files --------------------------------------------------------------


def _requirement_name(requirement: str) -> str:
    match = _REQUIREMENT_NAME.match(requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else ""


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    constants = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and constants == ["__main__"]


def _calls_main(nodes: list[ast.stmt]) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "main"
        for stmt in nodes
        for n in ast.walk(stmt)
    )


def read_front_matter(text: str) -> Optional[dict[str, Any]]:
    """The README's Space card, or None; ValueError when it is there but malformed."""
    return split_front_matter(text)[0]


class _FolderChecker:
    """Structural criteria of one environment folder, in the order a user fixes them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.report = ValidationReport(
            target=str(root),
            validation_type=LOCAL,
            standard_version="local",
            standard_profile="openenv-local",
            environment=root.name,
        )
        self.manifest: Optional[EnvManifest] = None
        self.pyproject: Optional[dict[str, Any]] = None
        self.app_tree: Optional[ast.Module] = None

    def add(
        self,
        criterion_id: str,
        description: str,
        passed: bool,
        details: str = "",
        *,
        required: bool = True,
        expected: Any = None,
        actual: Any = None,
    ) -> Criterion:
        return self.report.add(
            Criterion(criterion_id, description, passed, required, details, expected, actual)
        )

    @property
    def package(self) -> str:
        """The import package: from the manifest's app, else the script entry, else the folder."""
        if self.manifest is not None:
            return self.manifest.app.split(":", 1)[0].split(".", 1)[0]
        script = self.scripts.get("server", "")
        return script.split(":", 1)[0].split(".", 1)[0] if script else self.root.name

    @property
    def app_module(self) -> str:
        if self.manifest is not None:
            return self.manifest.app.split(":", 1)[0]
        return f"{self.package}.server.app"

    @property
    def app_file(self) -> Path:
        return self.root.joinpath(*self.app_module.split(".")).with_suffix(".py")

    @property
    def scripts(self) -> dict[str, str]:
        project = (self.pyproject or {}).get("project") or {}
        scripts = project.get("scripts") or {}
        return {str(k): str(v) for k, v in scripts.items()} if isinstance(scripts, dict) else {}

    def run(self) -> ValidationReport:
        self.check_manifest()
        self.check_pyproject()
        self.check_entry_point()
        self.check_dependency()
        self.check_layout()
        self.check_app()
        self.check_models()
        self.check_dockerfile()
        self.check_readme()
        self.check_lock()
        self.report.deployment_modes = self.deployment_modes()
        return self.report

    def check_manifest(self) -> None:
        description = f"{MANIFEST_NAME} parses and has the required keys (name, app)"
        try:
            self.manifest = _load_manifest(self.root)
        except ManifestError as exc:
            self.add("manifest", description, False, str(exc))
            return
        if ":" not in self.manifest.app:
            self.add(
                "manifest",
                description,
                False,
                f"app must be an import string 'package.server.app:app', got {self.manifest.app!r}",
            )
            self.manifest = None
            return
        self.report.environment = self.manifest.name
        self.add("manifest", description, True, f"{self.manifest.name}: app {self.manifest.app}")

    def check_pyproject(self) -> None:
        description = "pyproject.toml parses and names the distribution"
        path = self.root / "pyproject.toml"
        if not path.is_file():
            self.add("pyproject", description, False, f"no pyproject.toml in {self.root}")
            return
        try:
            self.pyproject = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            self.add("pyproject", description, False, f"pyproject.toml is not valid TOML: {exc}")
            return
        name = (self.pyproject.get("project") or {}).get("name")
        if not isinstance(name, str) or not _DIST_NAME.match(name):
            self.add(
                "pyproject", description, False, f"[project] name is missing or invalid: {name!r}"
            )
            return
        self.add("pyproject", description, True, f"distribution {name}")

    def check_entry_point(self) -> None:
        expected = f"{self.app_module}:main"
        description = "[project.scripts] server points at main() of the package's server app"
        entry = self.scripts.get("server")
        if self.pyproject is None:
            details = "pyproject.toml could not be read (see pyproject)"
        elif entry is None:
            details = f'add [project.scripts] server = "{expected}" to pyproject.toml'
        elif entry.replace(" ", "") != expected:
            details = f"server = {entry!r}; expected {expected!r}"
        else:
            details = f"server = {entry!r}"
        ok = entry is not None and entry.replace(" ", "") == expected
        self.add("server_entry_point", description, ok, details, expected=expected, actual=entry)

    def check_dependency(self) -> None:
        description = "the package depends on openenv"
        project = (self.pyproject or {}).get("project") or {}
        requirements = [str(r) for r in project.get("dependencies") or []]
        found = [r for r in requirements if _requirement_name(r) in OPENENV_DISTRIBUTIONS]
        if found:
            self.add("openenv_dependency", description, True, f"depends on {found[0]!r}")
        elif self.pyproject is None:
            self.add("openenv_dependency", description, False, "pyproject.toml could not be read")
        else:
            self.add(
                "openenv_dependency",
                description,
                False,
                'add "openenv" to [project] dependencies: the server image installs the '
                "runtime from them",
                actual=requirements,
            )

    def check_layout(self) -> None:
        package_dir = self.root / self.package
        wanted = ["__init__.py", "client.py", "server/__init__.py", "server/app.py"]
        description = f"the package folder has {', '.join(wanted)}"
        if not package_dir.is_dir():
            self.add(
                "package_layout",
                description,
                False,
                f"no package folder {self.package}/ in {self.root}",
            )
            return
        missing = [name for name in wanted if not (package_dir / name).is_file()]
        if missing:
            self.add(
                "package_layout",
                description,
                False,
                f"{self.package}/ lacks {', '.join(missing)}",
                actual={"missing": missing},
            )
        else:
            self.add("package_layout", description, True, f"{self.package}/ is complete")

    def check_app(self) -> None:
        path = self.app_file
        shown = path.relative_to(self.root) if path.is_relative_to(self.root) else path
        main_description = f"{shown} defines main()"
        guard_description = f"{shown} calls main() under if __name__ == '__main__'"
        problem = None
        if not path.is_file():
            problem = f"no {shown}"
        else:
            try:
                self.app_tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
                problem = f"{shown} cannot be parsed: {exception_message(exc)}"
        if self.app_tree is None:
            self.add("app_main_function", main_description, False, problem or "")
            self.add("app_main_guard", guard_description, False, problem or "")
            return
        body = self.app_tree.body
        defines = any(
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "main"
            for n in body
        )
        imports = any(
            isinstance(n, ast.ImportFrom) and any((a.asname or a.name) == "main" for a in n.names)
            for n in body
        )
        self.add(
            "app_main_function",
            main_description,
            defines or imports,
            "def main() at module level"
            if defines
            else "main is imported at module level"
            if imports
            else "define main() at module level: `[project.scripts] server` and `python -m` run it",
        )
        guards = [n for n in body if _is_main_guard(n)]
        if not guards:
            details = (
                'add `if __name__ == "__main__":\\n    main()` at the end so that '
                f"`python -m {self.app_module}` serves the environment"
            )
            self.add("app_main_guard", guard_description, False, details)
        elif not any(_calls_main(g.body) for g in guards):
            self.add(
                "app_main_guard",
                guard_description,
                False,
                'the `if __name__ == "__main__":` block does not call main()',
            )
        else:
            self.add("app_main_guard", guard_description, True, "main() runs under the guard")

    def check_models(self) -> None:
        description = "the action and observation models are in models.py or come from openenv"
        package_dir = self.root / self.package
        for candidate in (package_dir / "models.py", package_dir / "models" / "__init__.py"):
            if candidate.is_file():
                self.add(
                    "package_models",
                    description,
                    True,
                    f"{candidate.relative_to(self.root)} defines them",
                )
                return
        # MCP tool environments use openenv's CallToolAction / CallToolObservation directly.
        from_openenv = sorted(
            alias.name
            for node in (self.app_tree.body if self.app_tree is not None else [])
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("openenv")
            for alias in node.names
            if alias.name.endswith(("Action", "Observation"))
        )
        kinds = {name.endswith("Action") for name in from_openenv}
        if kinds == {True, False}:
            self.add(
                "package_models",
                description,
                True,
                f"the app uses openenv's {', '.join(from_openenv)}",
            )
        else:
            self.add(
                "package_models",
                description,
                False,
                f"no {self.package}/models.py, and the server app imports no Action and "
                "Observation classes from openenv: define the environment's models in models.py",
            )

    def dockerfile(self) -> Optional[Path]:
        for candidate in (
            self.root / "Dockerfile",
            self.root / "server" / "Dockerfile",
            self.root / self.package / "server" / "Dockerfile",
        ):
            if candidate.is_file():
                return candidate
        return None

    def check_dockerfile(self) -> None:
        found = self.dockerfile()
        description = "the image's Dockerfile: the folder's own (root or server/), or the template"
        if found is None:
            details = (
                "none shipped: `openenv build` and `openenv push` generate it from the template"
            )
            self.add("dockerfile", description, True, details)
        else:
            self.add("dockerfile", description, True, str(found.relative_to(self.root)))

    def check_readme(self) -> None:
        path = self.root / "README.md"
        description = "README.md exists; Space front matter, if any, has sdk: docker and app_port"
        card_description = (
            "README.md starts with Hugging Face Space front matter (sdk: docker, app_port)"
        )
        if not path.is_file():
            self.add("readme", description, False, f"no README.md in {self.root}")
            self.add(
                "readme_space_front_matter", card_description, False, "no README.md", required=False
            )
            return
        try:
            card = read_front_matter(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            self.add("readme", description, False, f"README.md: {exc}")
            self.add("readme_space_front_matter", card_description, False, str(exc), required=False)
            return
        if card is None:
            self.add("readme", description, True, "README.md (no front matter)")
            self.add(
                "readme_space_front_matter",
                card_description,
                False,
                "no front matter: a Space reads `sdk: docker` and `app_port: "
                f"{self.manifest.port if self.manifest else 8000}` from a block between `---` "
                "lines at the top of README.md (`openenv push` adds a default one)",
                required=False,
            )
            return
        problems = []
        if card.get("sdk") != "docker":
            problems.append(f"sdk is {card.get('sdk')!r}, not 'docker'")
        port = card.get("app_port")
        if port is None:
            problems.append("app_port is missing")
        elif not isinstance(port, int) or isinstance(port, bool):
            problems.append(f"app_port {port!r} is not a port number")
        elif self.manifest is not None and port != self.manifest.port:
            problems.append(
                f"app_port {port} differs from the port {self.manifest.port} in {MANIFEST_NAME}"
            )
        actual = {"sdk": card.get("sdk"), "app_port": port}
        if problems:
            details = "README.md front matter: " + "; ".join(problems)
            self.add("readme", description, False, details, actual=actual)
        else:
            self.add("readme", description, True, f"sdk: docker, app_port: {port}")
        self.add(
            "readme_space_front_matter",
            card_description,
            not problems,
            "; ".join(problems) or "present",
            required=False,
            actual=actual,
        )

    def check_lock(self) -> None:
        description = "uv.lock pins the dependencies (recommended)"
        if (self.root / "uv.lock").is_file():
            self.add("uv_lock", description, True, "uv.lock", required=False)
            return
        workspace = next((p for p in self.root.parents if (p / "uv.lock").is_file()), None)
        details = "no uv.lock: run `uv lock` in the folder for reproducible builds"
        if workspace is not None:
            details += f" (the workspace's {workspace / 'uv.lock'} does not travel with it)"
        self.add("uv_lock", description, False, details, required=False)

    def deployment_modes(self) -> dict[str, Any]:
        """How this folder can be run, and whether its files allow it."""
        report = self.report

        def ok(*ids: str) -> bool:
            return all((c := report.get(i)) is not None and c.passed for i in ids)

        root = self.root
        return {
            "docker": {
                # The generated Dockerfile installs the package and runs its server app.
                "supported": ok("dockerfile", "manifest", "openenv_dependency", "package_layout"),
                "command": f"openenv build {root}",
            },
            "openenv_serve": {
                "supported": ok("manifest", "package_layout"),
                "command": f"openenv serve {root}",
            },
            "uv_run": {
                "supported": ok("pyproject", "server_entry_point", "openenv_dependency"),
                "command": f"uv run --project {root} server",
            },
            "python_module": {
                "supported": ok("package_layout", "app_main_function", "app_main_guard"),
                "command": f"python -m {self.app_module}",
            },
        }


def check_structure(path: Path | str) -> ValidationReport:
    """The structural criteria of an environment folder (nothing is run)."""
    return _FolderChecker(Path(path).resolve()).run()


# -- an environment folder: serving it --------------------------------------------------------


class ServerStartError(RuntimeError):
    """The folder's server exited or never became healthy; the message says why."""


def startup_error(output: str) -> str:
    """The line that explains a failed start: the exception of the last traceback (with the
    file and line it came from), else the last error line the server printed."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    if not lines:
        return "the server printed nothing"
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if starts:
        tail = lines[starts[-1] :]
        exception = next((line for line in reversed(tail) if not line[0].isspace()), tail[-1])
        frames = [line.strip() for line in tail if line.lstrip().startswith('File "')]
        return f"{exception} ({frames[-1]})" if frames else exception
    errors = [line for line in lines if "error" in line.lower()]
    return (errors[-1] if errors else lines[-1]).strip()


def _read(log: IO[bytes]) -> str:
    log.flush()
    log.seek(0)
    return log.read().decode("utf-8", errors="replace")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the server and anything it started (its process group), politely then firmly."""

    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            if os.name == "posix":
                os.killpg(process.pid, sig)
            elif sig == signal.SIGTERM:
                process.terminate()
            else:
                process.kill()

    if process.poll() is None:
        send(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            send(getattr(signal, "SIGKILL", signal.SIGTERM))
            process.wait(5)
    if os.name == "posix":  # children that outlived their parent
        send(signal.SIGKILL)


@contextlib.contextmanager
def serve_folder(root: Path | str, start_timeout_s: float = 60.0) -> Iterator[str]:
    """Serve an environment folder (`openenv serve`, in a child process) on a free loopback
    port and yield its URL; the server is stopped when the block ends, however it ends.

    Raises `ServerStartError` with the server's own explanation if it does not become healthy.
    """
    root = Path(root).resolve()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    env.setdefault("OPENENV_LOG_LEVEL", "warning")
    env["PYTHONUNBUFFERED"] = "1"
    command = [sys.executable, "-m", "openenv.cli", "serve", str(root)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    isolation: dict[str, Any] = (
        {"start_new_session": True}
        if os.name == "posix"
        else {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
    )
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            **isolation,
        )
        try:
            _wait_healthy(url, process, start_timeout_s, log)
            yield url
        finally:
            _stop(process)


def _wait_healthy(
    url: str, process: subprocess.Popen[bytes], timeout_s: float, log: IO[bytes]
) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=1.0) as http:
        while True:
            if process.poll() is not None:
                raise ServerStartError(
                    f"the server exited with code {process.returncode} before answering "
                    f"/health: {startup_error(_read(log))}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if http.get(f"{url}/health").status_code == 200:
                    return
            if time.monotonic() >= deadline:
                output = _read(log).strip().splitlines()
                last = output[-1] if output else "nothing"
                raise ServerStartError(
                    f"{url}/health did not answer 200 within {timeout_s:g}s (last output: "
                    f"{last}); a slow environment may need a longer --start-timeout"
                )
            time.sleep(0.1)


def validate_local_environment(
    path: Path | str,
    *,
    run: bool = True,
    timeout_s: float = 5.0,
    start_timeout_s: float = 60.0,
    steps: int = DEFAULT_STEPS,
    progress: Optional[Callable[[str], None]] = None,
) -> ValidationReport:
    """Check an environment folder's files, then (with `run`) serve it on a loopback port and
    check it as a running environment; the server is always stopped before this returns."""
    report = check_structure(path)
    if not run:
        return report
    description = "the folder's server starts and answers /health"
    blocker = report.get("manifest")
    if blocker is not None and not blocker.passed:
        report.add(
            Criterion(
                "server_starts",
                description,
                False,
                details=f"not started: fix {MANIFEST_NAME} first (see manifest)",
            )
        )
        return report
    if progress:
        progress(f"Starting the server of {report.environment}")
    try:
        with serve_folder(report.target, start_timeout_s) as url:
            report.add(Criterion("server_starts", description, True, details=f"served at {url}"))
            if progress:
                progress(f"Checking {url}")
            _run_runtime_criteria(report, url, timeout_s, True, steps)
    except ServerStartError as exc:
        report.add(Criterion("server_starts", description, False, details=str(exc)))
    return report
