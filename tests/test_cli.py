"""The `openenv` console script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.envs import env_dirs, installed
from tests.support.server import REPO, free_port, wait_healthy

OPENENV = str(Path(sys.executable).with_name("openenv"))


def test_version() -> None:
    out = subprocess.run([OPENENV, "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    assert out.stdout.startswith("openenv ")


def test_serve_rejects_what_it_cannot_find() -> None:
    out = subprocess.run(
        [OPENENV, "serve", "no_such_env_anywhere"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2
    assert "neither an environment folder nor an installed environment" in out.stderr


def test_serve_runs_an_environment() -> None:
    port = free_port()
    process = subprocess.Popen(
        [OPENENV, "serve", "echo_env.server.app:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO,
        env={**os.environ, "OPENENV_LOG_LEVEL": "warning"},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, process)
        reply = httpx.post(f"{url}/reset", json={})
        assert reply.json()["observation"]["echoed_message"] == "Echo environment ready!"
    finally:
        process.terminate()
        # uvicorn shuts down gracefully, then re-raises SIGTERM to exit as the signal asks.
        assert process.wait(60) in (0, -signal.SIGTERM)


def test_serve_imports_an_app_from_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "single_file_app.py").write_text(
        "from echo_env.server.app import app\n", encoding="utf-8"
    )
    port = free_port()
    process = subprocess.Popen(
        [OPENENV, "serve", "single_file_app:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, process)
        assert httpx.get(f"{url}/metadata").json()["name"]
    finally:
        process.terminate()
        process.wait(60)


def test_serve_takes_an_environment_by_name() -> None:
    port = free_port()
    process = subprocess.Popen(
        [OPENENV, "serve", "grid-world", "--host", "127.0.0.1", "--port", str(port)],
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, process)
        reply = httpx.post(f"{url}/reset", json={})
        assert reply.json()["observation"]["position"] == [0, 0]
    finally:
        process.terminate()
        process.wait(60)


def test_serve_web_turns_the_playground_on_and_off() -> None:
    """`--web` beats an unset variable, `--no-web` a set one; off, `/` says what there is."""
    for flag, variable in (("--web", None), ("--no-web", "1")):
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k != "ENABLE_WEB_INTERFACE"}
        if variable is not None:
            env["ENABLE_WEB_INTERFACE"] = variable
        process = subprocess.Popen(
            [OPENENV, "serve", "echo", flag, "--host", "127.0.0.1", "--port", str(port)],
            env={**env, "OPENENV_LOG_LEVEL": "warning"},
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, process)
            root = httpx.get(url + "/")
            page = httpx.get(url + "/web/")
            assert httpx.post(f"{url}/reset", json={}).status_code == 200
        finally:
            process.terminate()
            _, stderr = process.communicate(timeout=60)
        if flag == "--web":
            assert root.status_code == 307 and root.headers["location"] == "web/"
            assert page.status_code == 200 and "<script" in page.text
            assert f"Playground: {url}/web/" in stderr
        else:
            assert page.status_code == 404
            assert root.status_code == 200, root.text
            pointer = root.json()
            assert pointer["environment"] == "echo_env"
            assert {"/health", "/reset", "/step", "/state", "/ws", "/mcp"} <= set(pointer["routes"])
            assert "--web" in pointer["web"] and "ENABLE_WEB_INTERFACE" in pointer["web"]


def test_list_shows_every_reference_environment() -> None:
    out = subprocess.run([OPENENV, "list", "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    listed = {info["name"] for info in json.loads(out.stdout)}
    on_disk = {path.name for path in env_dirs() if installed(path.name)}
    assert on_disk <= listed


def test_an_unexpected_error_is_one_line_and_exit_code_1() -> None:
    """As in OpenEnv, `main()` does not let an exception escape as a traceback; OPENENV_DEBUG=1
    shows it. A command that fails in a way no code path expects stands in for such a bug."""
    script = (
        "import sys, openenv.cli.__main__ as cli\n"
        "def broken():\n"
        "    raise KeyError('a bug\\nover two lines')\n"
        "cli.app = broken\n"
        "cli.main()\n"
    )
    command = [sys.executable, "-c", script]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: KeyError: ")
    assert "OPENENV_DEBUG=1" in lines[0] and "Traceback" not in out.stderr
    debug = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OPENENV_DEBUG": "1"},
    )
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr


def test_a_manifest_that_is_not_utf8_is_a_manifest_error(tmp_path: Path) -> None:
    (tmp_path / "openenv.yaml").write_bytes(b"name: x\xff\napp: server.app:app\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "openenv-x"\n')
    out = subprocess.run(
        [OPENENV, "push", str(tmp_path), "--dry-run"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0
    assert "not UTF-8" in out.stderr + out.stdout and "Traceback" not in out.stderr
