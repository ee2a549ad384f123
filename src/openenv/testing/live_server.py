"""A real server in its own process, for tests that play episodes over the wire.

```python
from openenv.testing import running_server

with running_server("my_env.server.app:app") as url:
    with MyEnv(base_url=url).sync() as env:
        env.reset()
```
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Optional, Union

import httpx


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the server binds it right after)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_server(
    app: str,
    *,
    pythonpath: Sequence[Union[str, Path]] = (),
    host: str = "127.0.0.1",
    port: Optional[int] = None,
    env: Optional[dict[str, str]] = None,
    startup_timeout: float = 30.0,
) -> Iterator[str]:
    """Serve `app` ("package.module:app") with uvicorn in a subprocess; yields its base URL.

    The process is stopped (SIGTERM, then SIGKILL after 10 s) when the block exits, whatever
    happens inside it. `pythonpath` folders are put first on the child's PYTHONPATH so an
    environment folder that is not installed can be served.
    """
    port = port or free_port(host)
    paths = [str(p) for p in pythonpath] + [os.environ.get("PYTHONPATH", "")]
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    command = [sys.executable, "-m", "uvicorn", app, "--host", host, "--port", str(port)]
    command += ["--log-level", "warning"]
    process = subprocess.Popen(command, env=child_env)
    url = f"http://{host}:{port}"
    try:
        wait_healthy(url, process, startup_timeout)
        yield url
    finally:
        stop_process(process)


def wait_healthy(
    url: str, process: Optional[subprocess.Popen] = None, timeout: float = 30.0
) -> None:
    """Poll `url`/health until it answers 200; fail early if `process` exits meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode} while starting")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the server at {url} was not healthy within {timeout} s")
        time.sleep(0.05)


def stop_process(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within `timeout` seconds."""
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
