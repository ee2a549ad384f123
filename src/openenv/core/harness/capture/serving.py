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
from typing import Any, TypeVar

import uvicorn


class ThreadedServer:
    """`uds`: also (or, with `tcp=False`, only) serve on that Unix socket, mode `uds_mode`.
    `graceful_s` bounds how long `stop` waits for open connections (None: for ever)."""

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        uds: str | None = None,
        tcp: bool = True,
        uds_mode: int = 0o660,
        graceful_s: int | None = None,
    ) -> None:
        if not tcp and not uds:
            raise ValueError("nothing to serve on: give uds, or leave tcp on")
        self.app = app
        self.host = host
        self.port = port
        self.uds = uds
        self.tcp = tcp
        self.uds_mode = uds_mode
        self.graceful_s = graceful_s
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sockets: list[socket.socket] = []
        self.url: str | None = None

    def start(self, timeout_s: float = 30.0) -> str:
        """Start serving; returns the base URL once the server accepts connections."""
        if self._thread is not None:
            assert self.url is not None
            return self.url
        self._sockets = []
        if self.tcp:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            tcp = socket.socket(family, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((self.host, self.port))
            self._sockets.append(tcp)
            self.port = tcp.getsockname()[1]
            host = f"[{self.host}]" if family == socket.AF_INET6 else self.host
            self.url = f"http://{host}:{self.port}"
        if self.uds:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.uds)
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(self.uds)
            os.chmod(self.uds, self.uds_mode)
            self._sockets.append(unix)
            if not self.tcp:  # the host part is nominal: clients connect to the socket
                self.url = "http://localhost"
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="auto",
            access_log=False,
            timeout_graceful_shutdown=self.graceful_s,
        )
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
        assert self.url is not None
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


_Served = TypeVar("_Served", bound="BackgroundServing")


class BackgroundServing:
    """`start`/`stop` (`close`) and `with` for a class whose app runs on `self._server`."""

    _server: ThreadedServer

    def start(self, timeout_s: float = 30.0) -> str:
        return self._server.start(timeout_s)

    def stop(self) -> None:
        self._server.stop()

    def close(self) -> None:
        self.stop()

    def __enter__(self: _Served) -> _Served:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
