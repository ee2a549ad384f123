"""What `openenv validate` checks, usable without the CLI.

An environment folder is checked for what deployment needs (manifest, pyproject entry point,
package layout, `main()` guard, Dockerfile, README front matter), then served and checked over
the wire by the same checker as `check_server`; a running server gets `check_server` alone.
Both give a `CheckReport`, whose JSON is OpenEnv's `validate --json` document.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Optional

from openenv import settings
from openenv.core.errors import exception_message
from openenv.core.manifest import (
    MANIFEST_NAME,
    EnvManifest,
    ManifestError,
    flat_package_name,
    is_flat_app,
    own_dockerfile,
    split_front_matter,
)
from openenv.core.manifest import load_manifest as _load_manifest
from openenv.core.utils import run_coroutine_sync

from .api import acheck_server
from .checks import DEFAULT_STEPS
from .live_server import free_port, wait_healthy
from .report import CheckReport, Severity

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: Dependency names that provide the openenv runtime (`openenv-core` is OpenEnv's legacy name).
OPENENV_DISTRIBUTIONS = frozenset({"openenv", "openenv-core"})

_DIST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


# -- a running server --------------------------------------------------------------------------


def normalize_url(url: str) -> str:
    """`http(s)://host[:port][/prefix]` without a trailing slash; ValueError otherwise."""
    url = url.strip()
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError(f"{url!r} is not an http(s) URL")
    return url.rstrip("/")


def validate_running_environment(
    url: str,
    timeout_s: float = 5.0,
    *,
    steps: int = DEFAULT_STEPS,
    report: Optional[CheckReport] = None,
) -> CheckReport:
    """Every `check_server` check of a running server; `timeout_s` bounds each request.
    With `report`, the checks are added to it (a folder's report, after its files)."""
    base = normalize_url(url)
    return run_coroutine_sync(
        acheck_server(base, steps=steps, timeout_s=timeout_s, raise_on_failure=False, report=report)
    )


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
        self.report = CheckReport(
            target=str(root),
            kind="local_environment",
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
    ) -> None:
        severity: Severity = "error" if required else "warning"
        self.report.add(
            criterion_id,
            passed,
            details,
            severity,
            description=description,
            expected=expected,
            actual=actual,
        )

    @property
    def flat(self) -> bool:
        """OpenEnv's flat layout: `app: server.app:app`, the folder itself is the package."""
        return self.manifest is not None and is_flat_app(self.manifest.app)

    @property
    def package(self) -> str:
        """The import package: from the manifest's app, else the script entry, else the folder."""
        if self.flat:
            return flat_package_name(self.root, self.pyproject or {})
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
    def package_dir(self) -> Path:
        return self.root if self.flat else self.root / self.package

    @property
    def installed_app_module(self) -> str:
        """The app's module once the package is installed ('my_env.server.app' when flat)."""
        return f"{self.package}.{self.app_module}" if self.flat else self.app_module

    @property
    def app_file(self) -> Path:
        return self.root.joinpath(*self.app_module.split(".")).with_suffix(".py")

    @property
    def scripts(self) -> dict[str, str]:
        project = (self.pyproject or {}).get("project") or {}
        scripts = project.get("scripts") or {}
        return {str(k): str(v) for k, v in scripts.items()} if isinstance(scripts, dict) else {}

    def run(self) -> CheckReport:
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
        expected = f"{self.installed_app_module}:main"
        # The flat layout's app also imports as 'server.app' from inside the folder.
        accepted = {expected, f"{self.app_module}:main"}
        description = "[project.scripts] server points at main() of the package's server app"
        entry = self.scripts.get("server")
        if self.pyproject is None:
            details = "pyproject.toml could not be read (see pyproject)"
        elif entry is None:
            details = f'add [project.scripts] server = "{expected}" to pyproject.toml'
        elif entry.replace(" ", "") not in accepted:
            details = f"server = {entry!r}; expected {expected!r}"
        else:
            details = f"server = {entry!r}"
        ok = entry is not None and entry.replace(" ", "") in accepted
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
        package_dir = self.package_dir
        wanted = ["__init__.py", "client.py", "server/__init__.py", "server/app.py"]
        where = (
            "the environment folder (OpenEnv's flat layout)" if self.flat else "the package folder"
        )
        description = f"{where} has {', '.join(wanted)}"
        shown = "./" if self.flat else f"{self.package}/"
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
                f"{shown} lacks {', '.join(missing)}",
                actual={"missing": missing},
            )
        else:
            self.add("package_layout", description, True, f"{shown} is complete")

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
        elif not any(isinstance(g, ast.If) and _calls_main(g.body) for g in guards):
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
        package_dir = self.package_dir
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
                f"no {'' if self.flat else self.package + '/'}models.py, and the server app "
                "imports no Action and "
                "Observation classes from openenv: define the environment's models in models.py",
            )

    def check_dockerfile(self) -> None:
        found = own_dockerfile(self.root)
        description = (
            "the image's Dockerfile: the template, or the folder's own (root or server/) with "
            "a FROM and a CMD or ENTRYPOINT"
        )
        if found is None:
            details = "none shipped: `openenv build` and `openenv push` use the template"
            self.add("dockerfile", description, True, details)
            return
        where = str(found.relative_to(self.root))
        instructions = {
            line.split(None, 1)[0].upper()
            for line in found.read_text(encoding="utf-8", errors="replace").splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        }
        missing = [
            need
            for need, accepted in (("FROM", {"FROM"}), ("CMD", {"CMD", "ENTRYPOINT"}))
            if not instructions & accepted
        ]
        if missing:
            self.add(
                "dockerfile",
                description,
                False,
                f"{where} has no {' or '.join(missing)} instruction: fix it, or delete it to "
                "use the template",
            )
        else:
            self.add("dockerfile", description, True, where)

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
        from openenv import _install

        if _install.uses_uv():
            details = "no uv.lock: run `uv lock` in the folder for reproducible builds"
        else:
            # A pip user: nothing of theirs reads the file; say so before naming uv.
            details = (
                "no uv.lock (optional: pip and `openenv build` do not use it; uv-based image "
                "builds such as OpenEnv's install from it. To write it: `pip install uv`, then "
                "`uv lock` in the folder)"
            )
        workspace = next((p for p in self.root.parents if (p / "uv.lock").is_file()), None)
        if workspace is not None:
            details += f"; the workspace's {workspace / 'uv.lock'} does not travel with it"
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


def check_structure(path: Path | str) -> CheckReport:
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
def _interrupts_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM (which `openenv validate` turns into an exit) wait until the block
    ends, then reach their own handlers: raised inside `Popen` they would leave its child
    running with no `Popen` object to stop it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def defer(signum: int, frame: Any) -> None:
        pending.append(signum)

    interrupts = [signal.SIGINT] + ([signal.SIGTERM] if os.name == "posix" else [])
    previous = {sig: signal.signal(sig, defer) for sig in interrupts}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


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
    env.setdefault(settings.LOG_LEVEL.name, "warning")
    env["PYTHONUNBUFFERED"] = "1"
    # The traceback, not the CLI's one-line summary: startup_error reads the file and line.
    env[settings.DEBUG.name] = "1"
    command = [sys.executable, "-m", "openenv.cli", "serve", str(root)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    isolation: dict[str, Any] = (
        {"start_new_session": True}
        if os.name == "posix"
        else {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
    )
    with tempfile.TemporaryFile() as log:
        process: subprocess.Popen[bytes] | None = None
        try:
            with _interrupts_deferred():
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
                wait_healthy(url, process, start_timeout_s)
            except RuntimeError:  # it exited
                why = startup_error(_read(log))
                message = f"the server exited with code {process.returncode} before answering"
                raise ServerStartError(f"{message} /health: {why}") from None
            except TimeoutError:
                output = _read(log).strip().splitlines()
                raise ServerStartError(
                    f"{url}/health did not answer 200 within {start_timeout_s:g}s (last output: "
                    f"{output[-1] if output else 'nothing'}); a slow environment may need a "
                    "longer --start-timeout"
                ) from None
            yield url
        finally:
            if process is not None:
                _stop(process)


def validate_local_environment(
    path: Path | str,
    *,
    run: bool = True,
    timeout_s: float = 5.0,
    start_timeout_s: float = 60.0,
    steps: int = DEFAULT_STEPS,
    progress: Optional[Callable[[str], None]] = None,
) -> CheckReport:
    """Check an environment folder's files, then (with `run`) serve it on a loopback port and
    check it as a running environment; the server is always stopped before this returns."""
    report = check_structure(path)
    if not run:
        return report
    description = "the folder's server starts and answers /health"
    manifest = report.get("manifest")
    if manifest is not None and not manifest.passed:
        detail = f"not started: fix {MANIFEST_NAME} first (see manifest)"
        report.add("server_starts", False, detail, description=description)
        return report
    if progress:
        progress(f"Starting the server of {report.environment}")
    try:
        with serve_folder(report.target, start_timeout_s) as url:
            report.add("server_starts", True, f"served at {url}", description=description)
            if progress:
                progress(f"Checking {url}")
            validate_running_environment(url, timeout_s, steps=steps, report=report)
    except ServerStartError as exc:
        report.add("server_starts", False, str(exc), description=description)
    return report
