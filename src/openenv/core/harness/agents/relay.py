"""Lets a sandboxed agent reach exactly two host endpoints: the model (through the capture
proxy) and the environment's MCP bridge.

The agent's sandbox has its own network namespace with only loopback in it. Two hops join it
to the host without opening anything else:

* on the host, `HostRelay` serves one Unix socket per endpoint in a private folder and
  forwards each connection to the endpoint's TCP address;
* inside the sandbox, `python -m openenv.core.harness.agents.relay --forward PORT=SOCKET ...
  -- COMMAND...` listens on 127.0.0.1:PORT (the sandbox's own loopback), forwards to the Unix
  socket bound in from the host, and runs COMMAND until it exits.

The folder is the only thing bound in, so those sockets are the only way out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

_CHUNK = 65536

Connector = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


def _forwarder(connect: Connector) -> Callable[..., Awaitable[None]]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await connect()
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pump(reader, upstream_writer), _pump(upstream_reader, writer))
        finally:
            for end in (writer, upstream_writer):
                end.close()
                with contextlib.suppress(Exception):
                    await end.wait_closed()

    return handle


def tcp_address(url: str) -> tuple[str, int]:
    """Host and port of an http(s) URL (the port its scheme implies when it has none)."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"not an http URL: {url!r}")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def relayed_url(url: str, port: int) -> str:
    """`url` as the sandbox sees it: same path, host 127.0.0.1:`port` (its relay)."""
    parts = urlsplit(url)
    return parts._replace(scheme="http", netloc=f"127.0.0.1:{port}").geturl()


class HostRelay:
    """Unix sockets in a private folder, each forwarding to one TCP endpoint; runs its own
    event loop on a daemon thread so the adapter's loop (or none) does not matter."""

    def __init__(self, endpoints: dict[str, str], *, owner: Optional[tuple[int, int]] = None):
        """`endpoints`: socket name -> http URL. `owner`: uid, gid the sandbox's commands run
        as, given the folder so they may connect."""
        self.folder = Path(tempfile.mkdtemp(prefix="openenv-relay-"))
        self._endpoints = {name: tcp_address(url) for name, url in endpoints.items()}
        self._owner = owner
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.base_events.Server] = []
        self._thread: Optional[threading.Thread] = None

    def socket_path(self, name: str) -> str:
        return str(self.folder / f"{name}.sock")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="openenv-host-relay", daemon=True)
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)
        future.result(timeout=10)
        for name in self._endpoints:
            os.chmod(self.socket_path(name), 0o777)
        os.chmod(self.folder, 0o755)
        if self._owner is not None:
            with contextlib.suppress(OSError):
                os.chown(self.folder, *self._owner)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    async def _serve(self) -> None:
        for name, (host, port) in self._endpoints.items():

            def connect(
                host: str = host, port: int = port
            ) -> Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
                return asyncio.open_connection(host, port)

            server = await asyncio.start_unix_server(
                _forwarder(connect), path=self.socket_path(name)
            )
            self._servers.append(server)

    async def _close_servers(self) -> None:
        for server in self._servers:
            server.close()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        # Let the connections' handlers finish closing before the loop stops.
        if tasks:
            await asyncio.wait(tasks, timeout=2)

    def stop(self) -> None:
        """Idempotent: closes the sockets, ends the thread and removes the folder."""
        if self._thread is not None and self._loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._close_servers(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        self._thread = None
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()
        for name in self._endpoints:
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path(name))
        with contextlib.suppress(OSError):
            self.folder.rmdir()


async def _serve_inside(forwards: Sequence[tuple[int, str]], command: Sequence[str]) -> int:
    servers = []
    for port, path in forwards:

        def connect(
            path: str = path,
        ) -> Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
            return asyncio.open_unix_connection(path)

        servers.append(await asyncio.start_server(_forwarder(connect), "127.0.0.1", port))
    # The command inherits our stdin/stdout/stderr: the relay is invisible to whoever drives it.
    process = await asyncio.create_subprocess_exec(*command)
    try:
        return await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        for server in servers:
            server.close()


def _parse_forward(text: str) -> tuple[int, str]:
    port, sep, path = text.partition("=")
    if not sep or not port.isdigit() or not path:
        raise argparse.ArgumentTypeError(f"expected PORT=SOCKET, got {text!r}")
    return int(port), path


def relay_argv(
    python: str, forwards: Sequence[tuple[int, str]], command: Sequence[str]
) -> list[str]:
    """The argv that runs `command` behind relays for `forwards` (port, socket path)."""
    argv = [python, "-m", "openenv.core.harness.agents.relay"]
    for port, path in forwards:
        argv += ["--forward", f"{port}={path}"]
    return [*argv, "--", *command]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m openenv.core.harness.agents.relay",
        description="Forward 127.0.0.1:PORT to a Unix socket while COMMAND runs.",
    )
    parser.add_argument("--forward", type=_parse_forward, action="append", default=[])
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.error("no command to run")
    try:
        return asyncio.run(_serve_inside(args.forward, command))
    except OSError as exc:
        print(f"relay: {exc}", file=sys.stderr)
        return 125


if __name__ == "__main__":
    sys.exit(main())
