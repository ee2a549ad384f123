"""The `openenv` console script."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.server import REPO, free_port, wait_healthy

OPENENV = str(Path(sys.executable).with_name("openenv"))


def test_version() -> None:
    out = subprocess.run([OPENENV, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert out.stdout.startswith("openenv ")


def test_serve_rejects_what_it_cannot_find() -> None:
    out = subprocess.run(
        [OPENENV, "serve", "no_such_env_anywhere"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 2
    assert "neither an environment folder nor an installed package" in out.stderr


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
        assert process.wait(15) in (0, -signal.SIGTERM)
