"""Start real servers on loopback ports for tests (a subprocess running uvicorn)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import httpx

from openenv.testing.live_server import free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class RunningServer:
    url: str
    port: int
    process: subprocess.Popen

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"


def wait_healthy(
    url: str, process: Optional[subprocess.Popen] = None, timeout: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with code {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"server at {url} did not become healthy in {timeout}s")


@contextlib.contextmanager
def serve(
    app: str,
    env: Optional[dict[str, str]] = None,
    python: str = sys.executable,
    workers: int = 1,
    extra_args: Optional[list[str]] = None,
) -> Iterator[RunningServer]:
    """Run `uvicorn <app>` (an import string) on a free loopback port until the block ends."""
    port = free_port()
    environ = {**os.environ, **(env or {})}
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "tests"), environ.get("PYTHONPATH", "")]
    )
    cmd = [
        python,
        "-m",
        "uvicorn",
        app,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--workers",
        str(workers),
        *(extra_args or []),
    ]
    process = subprocess.Popen(cmd, env=environ, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield RunningServer(url=url, port=port, process=process)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
