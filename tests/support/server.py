"""Start real servers on loopback ports for tests (a subprocess running uvicorn)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from openenv.testing.live_server import free_port, stop_process, wait_healthy

__all__ = ["REPO", "RunningServer", "free_port", "serve", "wait_healthy"]

REPO = Path(__file__).resolve().parents[2]


@dataclass
class RunningServer:
    url: str
    port: int
    process: subprocess.Popen

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"


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
        stop_process(process)
