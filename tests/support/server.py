"""Start real servers on loopback ports for tests.

`serve(app)` runs uvicorn on a real loopback socket. By default the server runs in this process,
on its own thread and event loop: the frames still cross a real TCP connection, but the test
does not pay for a new interpreter that imports FastAPI, fastmcp and the environment again
(seconds of CPU per server on a loaded machine). A subprocess is used where the test is about the
process (signals, exit codes, another interpreter, several workers) or where the server reads
its environment variables while it runs (`in_process=False`, or any `env` unless the caller says
the variables are only read while the app is built).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from openenv.testing import live_server
from openenv.testing.live_server import free_port
from tests.support.pycache import PYCACHE_ENV

__all__ = [
    "PYCACHE_ENV",
    "REPO",
    "RunningServer",
    "free_port",
    "serve",
    "stop_process",
    "wait_healthy",
]

REPO = Path(__file__).resolve().parents[2]

#: How long a server may take to start or stop before the test fails: long enough for a
#: machine under heavy load, so it only fires on a real hang.
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0

_ENV_LOCK = threading.Lock()


def wait_healthy(
    url: str, process: Optional[subprocess.Popen] = None, timeout: float = START_TIMEOUT_S
) -> None:
    """`live_server.wait_healthy` with a bound that only a server that never starts exceeds."""
    live_server.wait_healthy(url, process, timeout)


def stop_process(process: subprocess.Popen, timeout: float = STOP_TIMEOUT_S) -> None:
    """`live_server.stop_process`, waiting long enough for a loaded machine before SIGKILL."""
    live_server.stop_process(process, timeout)


@dataclass
class RunningServer:
    url: str
    port: int
    #: The server's process; None when it runs in this process (`in_process`).
    process: Optional[subprocess.Popen] = None

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
    in_process: Optional[bool] = None,
    options: Optional[dict[str, Any]] = None,
) -> Iterator[RunningServer]:
    """Serve `app` (an import string) with uvicorn on a free loopback port until the block ends.

    `in_process=None` runs the server in this process when nothing asks for a process of its own
    (no `env`, this interpreter, one worker, no extra uvicorn arguments). `in_process=True` with
    `env` sets those variables only while the app module is executed, so use it only for settings
    read when the app is built (`ServerConfig`, `OPENENV_MODE`), never for ones read per request.
    `options` are uvicorn options of an in-process server (e.g. `runner.uvicorn_options()`, to
    serve the way `openenv serve` does).
    """
    own_process = env is not None or python != sys.executable or workers != 1 or extra_args
    if in_process is None:
        in_process = not own_process
    elif in_process and (python != sys.executable or workers != 1 or extra_args):
        raise ValueError("python, workers and extra_args need a server process (in_process=False)")
    if options and not in_process:
        raise ValueError("options apply to an in-process server (in_process=True)")
    if in_process:
        with _serve_in_thread(app, env or {}, options or {}) as server:
            yield server
    else:
        with _serve_in_subprocess(app, env, python, workers, extra_args) as server:
            yield server


@contextlib.contextmanager
def _serve_in_subprocess(
    app: str,
    env: Optional[dict[str, str]],
    python: str,
    workers: int,
    extra_args: Optional[list[str]],
) -> Iterator[RunningServer]:
    port = free_port()
    environ = {**os.environ, **PYCACHE_ENV, **(env or {})}
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


def load_app(app: str, env: dict[str, str]) -> Any:
    """A fresh app object from `module:attribute`, built with `env` set.

    The module is executed again (its package and siblings are imported as usual), so two servers
    of the same app hold separate sessions, as two processes would.
    """
    for path in (str(REPO), str(REPO / "tests")):
        if path not in sys.path:
            sys.path.append(path)
    module_name, _, attribute = app.partition(":")
    parent = module_name.rpartition(".")[0]
    if parent:
        importlib.import_module(parent)
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"no module {module_name!r} for the app {app!r}")
    module = importlib.util.module_from_spec(spec)
    with _ENV_LOCK, _environment(env), _registered(module_name, module):
        spec.loader.exec_module(module)
    return getattr(module, attribute or "app")


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _registered(name: str, module: Any) -> Iterator[None]:
    """`module` is `sys.modules[name]` while it runs (pydantic resolves annotations there)."""
    saved = sys.modules.get(name)
    sys.modules[name] = module
    try:
        yield
    finally:
        if saved is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved


@contextlib.contextmanager
def _serve_in_thread(
    app: str, env: dict[str, str], options: dict[str, Any]
) -> Iterator[RunningServer]:
    import uvicorn

    # log_config=None: leave this process's logging (caplog) as it is.
    options = {**options, "log_level": "warning", "log_config": None}
    config = uvicorn.Config(load_app(app, env), **options)
    server = uvicorn.Server(config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # SystemExit when the app's start-up fails
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"uvicorn {app} :{port}", daemon=True)
    thread.start()
    try:
        _wait_started(server, thread, failure, app)
        yield RunningServer(url=f"http://127.0.0.1:{port}", port=port)
    finally:
        server.should_exit = True
        thread.join(STOP_TIMEOUT_S)
        if thread.is_alive():  # connections that would not close: stop waiting for them
            warnings.warn(
                f"the in-process server for {app} still had connections open after "
                f"{STOP_TIMEOUT_S}s: forced to exit (its lifespan shutdown is skipped)",
                ResourceWarning,
                stacklevel=2,
            )
            server.force_exit = True
            thread.join(STOP_TIMEOUT_S)
        sock.close()


def _wait_started(
    server: Any, thread: threading.Thread, failure: list[BaseException], app: str
) -> None:
    """Block until uvicorn has run the app's start-up and listens (`server.started`)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"the in-process server for {app} stopped while starting: {failure}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the in-process server for {app} did not start")
        thread.join(0.01)
