"""Serve an ASGI app with uvicorn in a background thread (TCP and, optionally, a Unix socket).

The stand-in and the capture proxy both live inside the process that uses them (a test, a
trainer), so they bind the socket themselves: port 0 gives a free port with no race.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import Any

import uvicorn


class ThreadedServer:
    def __init__(
        self, app: Any, *, host: str = "127.0.0.1", port: int = 0, uds: str | None = None
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.uds = uds
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sockets: list[socket.socket] = []
        self.url: str | None = None

    def start(self, timeout_s: float = 30.0) -> str:
        """Start serving; returns the base URL once the server accepts connections."""
        if self._thread is not None:
            assert self.url is not None
            return self.url
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        tcp = socket.socket(family, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind((self.host, self.port))
        self._sockets = [tcp]
        if self.uds:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.uds)
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(self.uds)
            os.chmod(self.uds, 0o660)
            self._sockets.append(unix)
        self.port = tcp.getsockname()[1]
        host = f"[{self.host}]" if family == socket.AF_INET6 else self.host
        self.url = f"http://{host}:{self.port}"
        config = uvicorn.Config(self.app, log_level="warning", lifespan="auto", access_log=False)
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(
            target=server.run,
            kwargs={"sockets": self._sockets},
            daemon=True,
            name=f"uvicorn:{self.port}",
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if not self._thread.is_alive():
                self._cleanup()
                raise RuntimeError(f"the server on {self.url} stopped while starting")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the server on {self.url} did not start within {timeout_s} s")
            time.sleep(0.01)
        return self.url

    def stop(self, timeout_s: float = 10.0) -> None:
        server, thread = self._server, self._thread
        if server is not None and thread is not None:
            server.should_exit = True
            thread.join(timeout_s)
            if thread.is_alive():
                server.force_exit = True
                thread.join(timeout_s)
        self._cleanup()

    def _cleanup(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets = []
        if self.uds:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.uds)
        self._server = None
        self._thread = None
