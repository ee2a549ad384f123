"""Test helpers: a cuttable asyncio TCP forwarder and a server that accepts but never answers."""

from __future__ import annotations

import asyncio
import contextlib
import socket


class TcpProxy:
    """Forwards 127.0.0.1:<port> to an upstream port, byte for byte.

    `cut()` aborts every live connection (both legs, like a network failure); `down = True`
    makes new connections be dropped at once; `freeze()` stops forwarding on live connections
    while keeping their sockets open (a black hole, detectable only by keepalive pings).
    """

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.port = 0
        self.down = False
        self.accepted = 0
        self._server: asyncio.base_events.Server | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._frozen: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def live_connections(self) -> int:
        return len(self._links)

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._on_client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def __aenter__(self) -> TcpProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def cut(self) -> int:
        """Abort every live connection; returns how many were cut."""
        links = list(self._links)
        self._links.clear()
        for client_writer, upstream_writer in links:
            for writer in (client_writer, upstream_writer):
                with contextlib.suppress(Exception):
                    writer.transport.abort()
        return len(links)

    def freeze(self) -> None:
        """Stop forwarding bytes on the live connections (sockets stay open)."""
        for client_writer, upstream_writer in self._links:
            self._frozen.add(client_writer)
            self._frozen.add(upstream_writer)

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.down:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(
                self.upstream_host, self.upstream_port
            )
        except OSError:
            writer.transport.abort()
            return
        link = (writer, up_writer)
        self._links.add(link)
        for src, dst, src_writer in ((reader, up_writer, writer), (up_reader, writer, up_writer)):
            task = asyncio.get_running_loop().create_task(self._pipe(src, dst, src_writer, link))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        src_writer: asyncio.StreamWriter,
        link: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        try:
            while True:
                data = await src.read(65536)
                if not data:
                    break
                if src_writer in self._frozen:
                    continue  # swallowed: the black hole
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if link in self._links:
                self._links.discard(link)
                for w in link:
                    with contextlib.suppress(Exception):
                        w.transport.abort()


class SilentServer:
    """Accepts TCP connections and never sends a byte (a hung server)."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self._accepted: list[socket.socket] = []
        self._server: asyncio.base_events.Server | None = None

    async def __aenter__(self) -> SilentServer:
        self._server = await asyncio.start_server(self._on_client, sock=self._sock)
        return self

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._accepted.append(writer)  # type: ignore[arg-type]
        await reader.read()  # read whatever comes, answer nothing

    @property
    def accepted(self) -> int:
        return len(self._accepted)

    async def __aexit__(self, *exc: object) -> None:
        for writer in self._accepted:
            with contextlib.suppress(Exception):
                writer.transport.abort()  # type: ignore[attr-defined]
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
