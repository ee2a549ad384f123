"""What the stand-ins of outside services (tests/providers/k8s_standin.py, daytona_standin.py)
share: serving an app on its own thread and event loop, and the servers they run for the
environments they are asked to start."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Optional

import uvicorn


def bind_node_port() -> socket.socket:
    """A loopback socket on a free port of Kubernetes' NodePort range (30000-32767)."""
    for _ in range(200):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", random.randint(30000, 32767)))
        except OSError:
            sock.close()
            continue
        return sock
    raise RuntimeError("no free port in the NodePort range")


def start_server(app: Any, sock: socket.socket) -> tuple[uvicorn.Server, asyncio.Task[Any]]:
    """Serve `app` on `sock` as a task of the running loop (an environment the stand-in runs)."""
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", log_config=None, lifespan="on")
    )
    return server, asyncio.ensure_future(server.serve(sockets=[sock]))


async def stop_server(server: uvicorn.Server, task: Optional[asyncio.Task[Any]]) -> None:
    """Stop at once, as a killed process would: open connections are dropped."""
    server.should_exit = True
    server.force_exit = True
    if task is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
    # A forced exit skips the app's lifespan shutdown: run it now that the connections are gone,
    # or its coroutine stays suspended and is torn down when the loop closes (an unraisable
    # "Event loop is closed" later, in whichever test collects it) and the sessions are leaked.
    if server.started:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.lifespan.shutdown(), 10)


@contextlib.contextmanager
def serve_standin(
    app: Any, on_stop: Optional[Callable[[], Awaitable[None]]] = None
) -> Iterator[tuple[str, asyncio.AbstractEventLoop]]:
    """Serve a stand-in's app on a loopback port, on its own thread and loop; yields its URL and
    loop. `on_stop` runs on that loop after the server stopped (to stop what it started)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", log_config=None, lifespan="off")
    )
    loop = asyncio.new_event_loop()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.serve(sockets=[sock]))
        if on_stop is not None:
            loop.run_until_complete(on_stop())
        loop.close()

    thread = threading.Thread(target=run, name="stand-in server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the stand-in server did not start")
        time.sleep(0.01)
    try:
        yield url, loop
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
