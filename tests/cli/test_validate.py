"""`openenv validate`: real folders are served and pass, broken copies fail the right criterion,
running servers are checked over the wire, and the folder's server never outlives the command."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from openenv.testing.drivers import mode_of
from openenv.testing.report import CheckReport
from openenv.testing.validation import (
    check_structure,
    read_front_matter,
    serve_folder,
    startup_error,
    validate_local_environment,
)
from tests.support.envs import env_params
from tests.support.server import REPO, RunningServer, free_port, serve

OPENENV = str(Path(sys.executable).with_name("openenv"))
ENVS = REPO / "envs"
ENDPOINT_IDS = [
    "health_endpoint",
    "openapi_version_available",
    "mode_endpoint_consistency",
    "mcp_endpoint",
    "metadata_endpoint",
    "schema_endpoint",
]
SHIPPED = sorted(path.name for path in ENVS.iterdir() if (path / "openenv.yaml").is_file())
STRUCTURE_IDS = [
    "manifest",
    "pyproject",
    "server_entry_point",
    "openenv_dependency",
    "package_layout",
    "app_main_function",
    "app_main_guard",
    "package_models",
    "dockerfile",
    "readme",
]
GUARD = 'if __name__ == "__main__":\n    main()\n'


def validate(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [OPENENV, "validate", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def validate_json(*args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = validate(*args, "--json")
    # The whole of stdout is one JSON document: anything else on it breaks json.loads.
    return out, json.loads(out.stdout)


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    ids = [c["id"] for c in report["criteria"]]
    assert len(ids) == len(set(ids)), f"duplicate criterion ids: {ids}"
    return {c["id"]: c for c in report["criteria"]}


def failed_required(report: dict[str, Any]) -> list[str]:
    return [c["id"] for c in report["criteria"] if c["required"] and not c["passed"]]


def copy_env(tmp_path: Path, name: str = "grid_world_env") -> Path:
    dest = tmp_path / name
    shutil.copytree(
        ENVS / name, dest, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.pyc")
    )
    return dest


def servers_of(folder: Path) -> list[int]:
    """Processes serving `folder` (from /proc: any that outlive validate are leaks)."""
    found = []
    folder = folder.resolve()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "serve" in argv and str(folder) in argv:
            found.append(int(proc.name))
    return found


needs_proc = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")


# -- folders ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped_reports() -> Callable[[str], CheckReport]:
    """`openenv validate` of one shipped environment, run when a test first asks for it and
    kept for the module. Each test pays for its own environment under its own timeout: one
    shared setup that validated all of them under the first test's timeout errored every test
    on a loaded machine. The console script runs the same function."""
    reports: dict[str, CheckReport] = {}

    def report(name: str) -> CheckReport:
        if name not in reports:
            # Atari frames are heavy: fewer steps. A request (a Jupyter kernel's start) can
            # take longer than the command's 5 s default on a loaded machine.
            reports[name] = validate_local_environment(
                ENVS / name, steps=3 if name == "atari_env" else 10, timeout_s=30.0
            )
        return reports[name]

    return report


def test_shipped_environments_are_all_checked() -> None:
    assert len(SHIPPED) >= 11 and {"echo_env", "openspiel_env"} <= set(SHIPPED)


@pytest.mark.parametrize("name", env_params(SHIPPED))
def test_shipped_environment_passes_validate(
    shipped_reports: Callable[[str], CheckReport], name: str
) -> None:
    report = shipped_reports(name)
    assert report.ok, str(report)
    for check in ("server_starts", "reset", "step", "determinism", "isolation", "http_session"):
        assert report[check].passed and not report[check].skipped, report[check]


@pytest.mark.parametrize("name", ["grid_world_env", "echo_env"])
def test_folder_report_is_openenv_json(
    shipped_reports: Callable[[str], CheckReport], name: str
) -> None:
    report = json.loads(shipped_reports(name).to_json())
    assert failed_required(report) == []
    assert report["passed"] is True
    assert report["validation_type"] == "local_environment"
    assert report["environment"] == name
    assert (report["standard_version"], report["standard_profile"]) == ("local", "openenv-local")
    assert report["mode"] == "simulation"
    criteria = by_id(report)
    for cid in [*STRUCTURE_IDS, "server_starts", *ENDPOINT_IDS, "reset", "http_session"]:
        assert criteria[cid]["passed"], (cid, criteria[cid])
    assert criteria["uv_lock"]["required"] is False
    summary = report["summary"]
    assert summary["required_passed_count"] == summary["required_total_count"] > 30
    assert all(mode["supported"] for mode in report["deployment_modes"].values())
    # The echo env is an MCP environment: its models come from openenv, its tools are checked.
    if name == "echo_env":
        assert "openenv" in criteria["package_models"]["details"]
        assert criteria["mcp_tools"]["passed"] and not criteria["mcp_tools"].get("skipped")


def test_missing_main_guard_fails_that_criterion(tmp_path: Path) -> None:
    folder = copy_env(tmp_path)
    app = folder / "grid_world_env" / "server" / "app.py"
    source = app.read_text()
    assert GUARD in source
    # Text that mentions the guard is not a guard: the check reads the AST.
    app.write_text(source.replace(GUARD, "# " + GUARD.replace("\n    ", " ")))
    out = validate(str(folder), "--no-run", "--verbose")
    assert out.returncode == 1
    assert out.stdout == ""  # without --json, the table goes to stderr
    assert re.search(r"FAIL\s+│\s+app_main_guard", out.stderr)
    assert re.search(r"PASS\s+│\s+app_main_function", out.stderr)
    assert "1 required criterion failed: app_main_guard" in out.stderr
    assert "openenv-grid-world" in out.stderr  # --verbose: details of a passing criterion
    assert "Traceback" not in out.stderr


def test_bad_manifest_fails_and_nothing_is_started(tmp_path: Path) -> None:
    folder = copy_env(tmp_path)
    (folder / "openenv.yaml").write_text("spec_version: 1\nname: grid_world_env\nport: [8000\n")
    out, report = validate_json(str(folder))
    assert out.returncode == 1
    criteria = by_id(report)
    assert "not valid YAML" in criteria["manifest"]["details"]
    assert not criteria["server_starts"]["passed"]
    assert "manifest" in criteria["server_starts"]["details"]
    assert set(failed_required(report)) >= {"manifest", "server_starts"}


@needs_proc
def test_app_that_raises_on_import_is_a_failed_criterion(tmp_path: Path) -> None:
    folder = copy_env(tmp_path)
    app = folder / "grid_world_env" / "server" / "app.py"
    app.write_text(
        app.read_text().replace(
            "app = create_app(", "raise RuntimeError('boom: GRID_KEY unset')\n\napp = create_app("
        )
    )
    out, report = validate_json(str(folder))
    assert out.returncode == 1
    assert failed_required(report) == ["server_starts"]
    details = by_id(report)["server_starts"]["details"]
    assert "RuntimeError: boom: GRID_KEY unset" in details
    assert "app.py" in details
    assert "Traceback" not in out.stderr
    assert servers_of(folder) == []


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM and process groups are POSIX")
def test_sigterm_as_the_server_is_spawned_still_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race behind a server left running: SIGTERM (an exit, in `openenv validate`) landing
    while `Popen` is still returning, before the caller holds the process to stop."""
    from openenv.cli.commands.validate import _sigterm_as_exit

    folder = copy_env(tmp_path)
    spawned: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    class SignalledPopen(real_popen):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            spawned.append(self)
            signal.raise_signal(signal.SIGTERM)  # its handler runs before this returns

    monkeypatch.setattr(subprocess, "Popen", SignalledPopen)
    with _sigterm_as_exit(), pytest.raises(SystemExit) as exited:
        with serve_folder(folder):
            pytest.fail("the signal must end the block before the server is used")
    monkeypatch.undo()
    try:
        assert exited.value.code == 143
        assert len(spawned) == 1
        assert spawned[0].poll() is not None  # stopped (and reaped), not left running
    finally:
        for process in spawned:  # a failure here must not leave the server behind either
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


@needs_proc
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"]
)
def test_interrupting_validate_stops_the_server(tmp_path: Path, sig: int, code: int) -> None:
    folder = copy_env(tmp_path)
    app = folder / "grid_world_env" / "server" / "app.py"
    source = app.read_text()
    assert "app = create_app(" in source  # the server hangs while importing its app
    app.write_text(
        source.replace("app = create_app(", "import time\n\ntime.sleep(60)\napp = create_app(")
    )
    process = subprocess.Popen(
        [OPENENV, "validate", str(folder), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 120  # generous: only a server that never starts
        while not servers_of(folder):
            assert time.monotonic() < deadline, "the folder's server never started"
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.05)
        process.send_signal(sig)
        assert process.wait(30) == code
        deadline = time.monotonic() + 60  # generous: only a server left behind
        while servers_of(folder) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert servers_of(folder) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
        for pid in servers_of(folder):  # never leave a server behind, even when this test fails
            os.kill(pid, signal.SIGKILL)


def test_missing_path_is_a_usage_error() -> None:
    out = validate(str(REPO / "no_such_env_folder"))
    assert out.returncode == 2
    assert "neither an environment folder nor an http(s) URL" in out.stderr
    assert out.stdout == ""


def test_folder_that_is_no_environment_is_a_usage_error(tmp_path: Path) -> None:
    out = validate(str(tmp_path))
    assert out.returncode == 2
    assert "not an environment folder" in out.stderr


# -- running servers ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def echo_server() -> Iterator[RunningServer]:
    with serve("echo_env.server.app:app") as server:
        yield server


def test_running_server_passes(echo_server: RunningServer) -> None:
    out, report = validate_json(echo_server.url + "/")
    assert out.returncode == 0, out.stderr
    assert report["target"] == echo_server.url
    assert report["validation_type"] == "running_environment"
    assert report["passed"] is True
    assert report["mode"] == "simulation"
    assert report["standard_version"] == "1.0.0"
    assert report["standard_profile"] == "openenv-http/1.x"
    criteria = by_id(report)
    assert list(criteria)[:6] == ENDPOINT_IDS
    for cid in [*ENDPOINT_IDS, "reset", "step", "http_session", "mcp_tools"]:
        assert criteria[cid]["passed"] is True, criteria[cid]
        assert criteria[cid]["required"] is True
    assert criteria["health_endpoint"]["actual"] == {"status_code": 200, "status": "healthy"}
    assert report["summary"]["failed_criteria"] == []
    assert "environment" not in report and "deployment_modes" not in report
    assert "every required criterion passed" in out.stderr


def test_nothing_listening_is_a_clear_failure() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    out, report = validate_json("--url", url, "--timeout", "2")
    assert out.returncode == 1
    assert f"nothing answers at {url}" in out.stderr
    assert "Is the server running?" in out.stderr
    assert "Traceback" not in out.stderr
    assert report["passed"] is False
    assert failed_required(report) == ["health_endpoint"]  # and nothing else was tried


def test_url_and_target_together_is_a_usage_error() -> None:
    out = validate("envs/echo_env", "--url", "http://127.0.0.1:1")
    assert out.returncode == 2
    assert "--url" in out.stderr
    out = validate("--url", "http://")
    assert out.returncode == 2
    assert "not an http(s) URL" in out.stderr


# -- the logic, directly ------------------------------------------------------------------------


def test_mode_is_read_from_the_openapi_paths() -> None:
    def check(paths: list[str]) -> tuple[str | None, bool]:
        mode, ok, *_ = mode_of({path: {} for path in paths})
        return mode, ok

    assert check(["/health", "/reset", "/step", "/state"]) == ("simulation", True)
    assert check(["/health", "/mcp"]) == ("production", True)
    assert check(["/health", "/reset", "/step"]) == ("simulation", False)
    assert check(["/health", "/step"]) == ("production", False)


def test_front_matter() -> None:
    card = read_front_matter("---\ntitle: Echo\nsdk: docker\napp_port: 8000\n---\n# Echo\n")
    assert card == {"title": "Echo", "sdk": "docker", "app_port": 8000}
    assert read_front_matter("# Echo\n---\n") is None
    with pytest.raises(ValueError, match="no closing"):
        read_front_matter("---\nsdk: docker\n")


def test_readme_front_matter_must_say_docker_and_the_port(tmp_path: Path) -> None:
    folder = copy_env(tmp_path)
    readme = folder / "README.md"
    body = readme.read_text()
    readme.write_text("---\nsdk: docker\napp_port: 8000\n---\n" + body)
    report = check_structure(folder)
    assert report["readme"].passed and report["readme_space_front_matter"].passed
    readme.write_text("---\nsdk: gradio\napp_port: 7860\n---\n" + body)
    report = check_structure(folder)
    assert not report["readme"].passed and report["readme"].severity == "error"
    assert "sdk is 'gradio'" in report["readme"].detail
    assert "differs from the port 8000" in report["readme"].detail


def test_pyproject_and_package_problems(tmp_path: Path) -> None:
    folder = copy_env(tmp_path)
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text()
        .replace('dependencies = ["openenv"]', 'dependencies = ["numpy>=1"]')
        .replace('"grid_world_env.server.app:main"', '"grid_world_env.server.app:serve"')
    )
    (folder / "grid_world_env" / "client.py").unlink()
    report = check_structure(folder)
    assert [c.name for c in report.failures] == [
        "server_entry_point",
        "openenv_dependency",
        "package_layout",
    ]
    assert report["server_entry_point"].expected == "grid_world_env.server.app:main"
    assert "client.py" in report["package_layout"].detail
    assert report.deployment_modes is not None
    assert report.deployment_modes["docker"]["supported"] is False  # no openenv dependency


def test_own_dockerfile_must_say_what_to_run(tmp_path: Path) -> None:
    folder = copy_env(tmp_path)
    assert check_structure(folder)["dockerfile"].passed  # none shipped: the template
    (folder / "server").mkdir()
    own = folder / "server" / "Dockerfile"
    own.write_text("FROM openenv-base:latest\n# CMD forgotten\nRUN true\n")
    report = check_structure(folder)
    assert [c.name for c in report.failures] == ["dockerfile"]
    assert "server/Dockerfile has no CMD" in report["dockerfile"].detail
    own.write_text(own.read_text() + 'ENTRYPOINT ["python", "-m", "grid_world_env.server.app"]\n')
    assert check_structure(folder)["dockerfile"].passed


def test_models_may_come_from_openenv_but_must_exist(tmp_path: Path) -> None:
    folder = copy_env(tmp_path)
    (folder / "grid_world_env" / "models.py").unlink()
    report = check_structure(folder)
    assert [c.name for c in report.failures] == ["package_models"]
    assert "models.py" in report["package_models"].detail


def test_startup_error_names_the_exception_and_where() -> None:
    output = (
        "Serving x.server.app:app on http://127.0.0.1:1\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/runpy.py", line 198, in _run_module_as_main\n'
        '  File "/env/x/server/app.py", line 7, in <module>\n'
        "    import missing_dep\n"
        "ModuleNotFoundError: No module named 'missing_dep'\n"
    )
    assert startup_error(output) == (
        "ModuleNotFoundError: No module named 'missing_dep' "
        '(File "/env/x/server/app.py", line 7, in <module>)'
    )
    assert startup_error("ERROR:    [Errno 98] address already in use\n").startswith("ERROR")
    assert startup_error("") == "the server printed nothing"


def test_json_report_shape_matches_openenv(tmp_path: Path) -> None:
    report = check_structure(copy_env(tmp_path)).to_dict()
    assert list(report) == [
        "target",
        "environment",
        "validation_type",
        "standard_version",
        "standard_profile",
        "passed",
        "summary",
        "criteria",
        "issues",
        "deployment_modes",
    ]
    assert set(report["summary"]) == {
        "passed_count",
        "total_count",
        "failed_criteria",
        "required_passed_count",
        "required_total_count",
    }
    assert all({"id", "description", "passed", "required"} <= set(c) for c in report["criteria"])
    assert report["passed"] is True
    warned = {issue.split(":")[0] for issue in report["issues"]}
    assert warned <= {"uv_lock", "readme_space_front_matter"}
    assert os.path.isabs(report["target"])


def test_manifest_without_app_names_the_missing_key(tmp_path: Path) -> None:
    folder = copy_env(tmp_path)
    (folder / "openenv.yaml").write_text("spec_version: 1\nname: grid_world_env\n")
    report = check_structure(folder)
    assert [c.name for c in report.failures] == ["manifest"]
    assert "app" in report["manifest"].detail
    assert report.deployment_modes is not None
    assert report.deployment_modes["openenv_serve"]["supported"] is False


@pytest.mark.parametrize("uv", [False, True], ids=["pip-user", "uv-user"])
def test_the_uv_lock_hint_fits_how_the_user_installs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uv: bool
) -> None:
    """A pip user (no uv on PATH, a venv pip made) is not told to run `uv lock` as if they had
    uv: the hint says nothing of theirs needs the file, then how to write it."""
    from openenv import _install

    monkeypatch.setattr(_install.shutil, "which", lambda name, *a, **k: None)
    monkeypatch.setattr(_install, "made_by_uv", lambda: uv)
    detail = check_structure(copy_env(tmp_path))["uv_lock"].detail
    if uv:
        assert detail.startswith("no uv.lock: run `uv lock` in the folder"), detail
    else:
        assert "pip and `openenv build` do not use it" in detail, detail
        assert "run `uv lock`" not in detail and "`pip install uv`, then `uv lock`" in detail


def test_table_shows_details_of_passing_criteria_only_with_verbose(tmp_path: Path) -> None:
    report = check_structure(copy_env(tmp_path))

    def render(verbose: bool) -> str:
        console = Console(file=io.StringIO(), width=200)
        console.print(report.table(verbose))
        return console.file.getvalue()  # type: ignore[attr-defined]

    quiet, loud = render(False), render(True)
    for text in (quiet, loud):
        assert re.search(r"WARN\s+│\s+uv_lock\s+│\s+no uv.lock", text)
        assert re.search(r"PASS\s+│\s+pyproject\s+│", text)
    assert "distribution openenv-grid-world" not in quiet
    assert "pyproject.toml parses" in quiet  # what was checked, instead
    assert "distribution openenv-grid-world" in loud
