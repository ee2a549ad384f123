"""What a server's start pays for: fastmcp only for MCP environments, no collector passes while
it imports (`openenv.core.env_server.boot`, the command of the images `openenv build` makes)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from openenv.core.env_server import runner
from tests.support.server import PYCACHE_ENV, REPO, serve


def run_python(args: list[str], cwd: Path = REPO) -> str:
    env = {**os.environ, **PYCACHE_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), str(REPO), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_plain_environment_server_does_not_import_fastmcp() -> None:
    script = (
        "import sys, json; import math_env.server.app; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('fastmcp', 'mcp') or m.endswith('.mcp_environment'))))"
    )
    assert json.loads(run_python(["-c", script])) == []


def test_an_mcp_environment_server_still_imports_it() -> None:
    script = "import sys; import echo_env.server.app; print('fastmcp' in sys.modules)"
    assert run_python(["-c", script]).strip() == "True"


def test_a_server_start_leaves_out_what_serving_does_not_need() -> None:
    # fastmcp's client (~200 ms: its auth helpers) is imported at the first tool call, httpx
    # (~50 ms) only by a multi-worker router or an LLM judge, h11 only when httptools is missing.
    script = textwrap.dedent(
        """
        import json, sys
        import echo_env.server.app, math_env.server.app
        from openenv.core.env_server.runner import uvicorn_options

        unneeded = ["httpx", "fastmcp.client"]
        if "HttpTools" in uvicorn_options()["http"].func.__name__:
            unneeded.append("h11")
        print(json.dumps([name for name in unneeded if name in sys.modules]))
        """
    )
    assert json.loads(run_python(["-c", script])) == []


def test_boot_runs_the_module_as_python_m_does_with_the_collector_off(tmp_path: Path) -> None:
    (tmp_path / "booted_pkg").mkdir()
    (tmp_path / "booted_pkg" / "__init__.py").write_text("")
    (tmp_path / "booted_pkg" / "app.py").write_text(
        textwrap.dedent(
            """
            import gc, json, sys
            from openenv.core.env_server import runner
            seen = {"name": __name__, "argv": sys.argv[1:], "gc_on": gc.isenabled()}
            runner.freeze_startup_objects()  # what the app's lifespan does as it starts
            seen.update(gc_on_serving=gc.isenabled(), frozen=gc.get_freeze_count() > 0)
            print(json.dumps(seen))
            """
        )
    )
    out = run_python(
        ["-m", "openenv.core.env_server.boot", "booted_pkg.app", "--port", "8123"], cwd=tmp_path
    )
    assert json.loads(out) == {
        "name": "__main__",
        "argv": ["--port", "8123"],
        "gc_on": False,
        "gc_on_serving": True,
        "frozen": True,
    }


def test_boot_without_a_module_says_how_to_use_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "openenv.core.env_server.boot"], capture_output=True, text=True
    )
    assert out.returncode != 0 and "usage: python -m openenv.core.env_server.boot" in out.stderr


def test_a_server_turns_the_deferred_collector_back_on_as_it_starts() -> None:
    runner.defer_gc()
    try:
        assert not gc.isenabled()
        with serve("math_env.server.app:app", in_process=True) as server:
            assert httpx.get(server.url + "/health", timeout=30).status_code == 200
            assert gc.isenabled()
            assert gc.get_freeze_count() > 0
    finally:
        runner._gc_deferred = False
        gc.enable()
        gc.unfreeze()


def test_an_app_imported_by_the_runner_imports_with_the_collector_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "runner_imported_app.py").write_text(
        "import gc\nCOLLECTOR_ON_AT_IMPORT = gc.isenabled()\napp = object()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        app = runner.import_app("runner_imported_app:app")
        module = sys.modules["runner_imported_app"]
        assert app is module.app
        assert module.COLLECTOR_ON_AT_IMPORT is False
        # On again and the imports frozen, whether or not the app's lifespan ever runs.
        assert gc.isenabled() and gc.get_freeze_count() > 0
        assert runner.import_app(app) is app
    finally:
        sys.modules.pop("runner_imported_app", None)
        gc.enable()
        gc.unfreeze()


def test_an_app_string_that_does_not_import_is_left_for_uvicorn_to_report() -> None:
    assert runner.import_app("no_such_module_here:app") == "no_such_module_here:app"
    assert runner.import_app("openenv:no_such_app") == "openenv:no_such_app"
    assert gc.isenabled()
