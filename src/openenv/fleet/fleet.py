"""`EnvFleet`: many sessions of one environment over many servers, for one trainer.

A server holds many sessions (up to its `/capacity`), so a fleet of a few servers serves
thousands of sessions. The fleet starts the servers on any provider (local processes, Docker,
Ray, Kubernetes, Daytona: whatever `get_provider` returns), keeps them healthy, and hands out
sessions as ordinary `EnvClient`s placed on the least-loaded server. What it adds to the
protocol is bookkeeping only: once a session is connected, its frames go straight to its
server.

    async with EnvFleet("echo", servers=4, client=EchoEnv) as fleet:
        async with fleet.session() as env:      # an EchoEnv on the least-loaded server
            await env.reset()
        vec = await fleet.vector(256)           # 256 sessions reset/stepped together
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from openenv import settings
from openenv.core.env_client import EnvClient
from openenv.core.errors import is_infrastructure_error
from openenv.core.generic_client import GenericEnvClient
from openenv.providers import EnvSpec, Provider, StartedEnv, get_provider

from .errors import FleetError, FleetFullError, ServerLostError
from .ratelimit import CreationRateLimiter, effective_rate

if TYPE_CHECKING:
    from typing_extensions import Self

    from .sync import SyncEnvFleet
    from .vector import VectorEnv

logger = logging.getLogger("openenv.fleet")

AnyClient = EnvClient[Any, Any, Any]


@dataclass(eq=False)
class FleetServer:
    """One environment server of the fleet and the sessions placed on it."""

    env: StartedEnv
    capacity: int
    sessions: set[AnyClient] = field(default_factory=set)
    #: Slots promised to sessions that are still connecting.
    reserved: int = 0
    alive: bool = True
    #: When `/health` started failing (None: it answers). Such a server gets no new sessions.
    unhealthy_since: Optional[float] = None

    @property
    def load(self) -> int:
        return len(self.sessions) + self.reserved

    @property
    def free(self) -> int:
        return self.capacity - self.load


@dataclass(frozen=True)
class FleetStats:
    servers: int
    starting: int
    sessions: int
    capacity: int
    servers_started: int
    servers_lost: int
    #: The creation limit in force (the lower of the fleet's and the provider's), None: none.
    max_creates_per_s: Optional[float]
    #: Sessions per live server, in the fleet's order.
    load: tuple[int, ...]


class _ServerWatch:
    """A session's `EnvironmentOwner`: the client can tell a dead server from a network blip,
    while stopping the server stays the fleet's job (closing a session stops nothing)."""

    def __init__(self, fleet: EnvFleet, server: FleetServer) -> None:
        self._fleet = fleet
        self._server = server

    @property
    def label(self) -> str:
        env = self._server.env
        return f"environment {env.id} ({env.spec.target})"

    async def is_running(self) -> bool:
        return self._server.alive and await self._fleet._server_alive(self._server)

    async def log_tail(self, lines: int = 40) -> str:
        return await self._fleet.provider.log_tail(self._server.env, lines)

    async def stop(self) -> None:
        return None


class EnvFleet:
    """Servers of one environment on one provider, and sessions placed across them.

    Size the warm pool with `servers` (server count) or `sessions` (how many sessions the
    trainer will hold at once; the server count follows from each server's capacity).
    `max_servers` lets the fleet grow when every slot is taken; otherwise a full fleet makes
    `acquire()` wait up to `acquire_timeout_s`, then raise `FleetFullError`.

    A server's capacity is what its `/capacity` reports (capped by `sessions_per_server`);
    a server without that route (OpenEnv's) holds `sessions_per_server` or one session.
    Remaining keyword arguments go to the `EnvSpec` (env_vars, limits, network,
    ready_timeout_s).
    """

    def __init__(
        self,
        target: str | EnvSpec,
        *,
        client: type[AnyClient] = GenericEnvClient,
        provider: str | Provider | None = None,
        servers: Optional[int] = None,
        sessions: Optional[int] = None,
        sessions_per_server: Optional[int] = None,
        max_servers: Optional[int] = None,
        max_creates_per_s: Optional[float] = None,
        acquire_timeout_s: float = 60.0,
        health_interval_s: Optional[float] = 1.0,
        unhealthy_after_s: float = 30.0,
        client_kwargs: Optional[dict[str, Any]] = None,
        **spec_fields: Any,
    ) -> None:
        if servers is not None and servers < 1:
            raise ValueError("servers must be at least 1")
        if sessions is not None and sessions < 1:
            raise ValueError("sessions must be at least 1")
        if sessions_per_server is not None and sessions_per_server < 1:
            raise ValueError("sessions_per_server must be at least 1")
        self.spec = EnvSpec.of(target, **spec_fields)
        self.client_class = client
        self.sessions_per_server = sessions_per_server
        self.max_creates_per_s = max_creates_per_s
        self.acquire_timeout_s = acquire_timeout_s
        self.health_interval_s = health_interval_s
        self.unhealthy_after_s = unhealthy_after_s
        self.client_kwargs = dict(client_kwargs or {})
        self._wanted_servers = servers
        self._wanted_sessions = sessions
        self._max_servers = max_servers
        self._provider_arg = provider
        self._owns_provider = not isinstance(provider, Provider)
        self._provider: Optional[Provider] = None
        self._limiter: Optional[CreationRateLimiter] = None
        self._servers: list[FleetServer] = []
        #: Every environment the fleet started and has not stopped (lost ones included).
        self._envs: dict[str, StartedEnv] = {}
        self._placement: dict[AnyClient, FleetServer] = {}
        self._lost: dict[AnyClient, ServerLostError] = {}
        self._starting = 0
        self._waiting = 0
        self._capacity_hint = 1
        self._changed: Optional[asyncio.Event] = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._monitor: Optional[asyncio.Task[None]] = None
        self._started = False
        self._start_lock: Optional[asyncio.Lock] = None
        self._closed = False
        self.servers_started = 0
        self.servers_lost = 0
        self._sync: Optional[SyncEnvFleet] = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def provider(self) -> Provider:
        if self._provider is None:
            self._provider = get_provider(self._provider_arg)
        return self._provider

    @property
    def target_servers(self) -> int:
        """The warm pool's size: servers kept running (a lost one is replaced)."""
        if self._wanted_servers is not None:
            return self._wanted_servers
        if self._wanted_sessions is not None:
            return max(1, math.ceil(self._wanted_sessions / self._capacity_hint))
        return 1

    @property
    def max_servers(self) -> int:
        return max(self._max_servers or 0, self.target_servers)

    async def start(self) -> Self:
        """Start the warm pool; returns once every server answers `/health`."""
        self._check_open()
        if self._started:
            return self
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:  # concurrent first acquires wait for the one start
            if not self._started:
                await self._start_pool()
        return self

    async def _start_pool(self) -> None:
        self._changed = asyncio.Event()
        provider = self.provider
        self._limiter = CreationRateLimiter(
            effective_rate(self.max_creates_per_s, type(provider).max_creates_per_s)
        )
        try:
            await self._add_server()  # the first tells the capacity, hence the pool's size
            more = self.target_servers - len(self._servers)
            results = await asyncio.gather(
                *(self._add_server() for _ in range(more)), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        except BaseException:
            await self.close()
            raise
        if self.health_interval_s:
            self._monitor = asyncio.get_running_loop().create_task(self._watch())
        self._started = True

    async def close(self) -> None:
        """Close every session and stop every server the fleet started; safe to call twice."""
        self._closed = True
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(BaseException):
                await self._monitor
            self._monitor = None
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(
            *(self._disconnect(client) for client in list(self._placement)),
            return_exceptions=True,
        )
        self._placement.clear()
        self._lost.clear()
        provider = self._provider
        if provider is not None:
            envs, self._envs = list(self._envs.values()), {}
            await asyncio.gather(*(provider.stop(env) for env in envs), return_exceptions=True)
            if self._owns_provider:
                await provider.close()
        self._servers.clear()
        self._wake()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def sync(self) -> SyncEnvFleet:
        """The blocking twin, for sync trainers: the same fleet on a private loop thread."""
        from .sync import SyncEnvFleet

        if self._sync is None:
            self._sync = SyncEnvFleet(self)
        return self._sync

    # -- sessions ----------------------------------------------------------------------------

    async def acquire(self, timeout_s: Optional[float] = None) -> AnyClient:
        """A connected session on the least-loaded live server.

        When every slot is taken, wait (growing the fleet up to `max_servers`) for up to
        `timeout_s` (default `acquire_timeout_s`), then raise `FleetFullError`."""
        await self.start()
        loop = asyncio.get_running_loop()
        wait_s = self.acquire_timeout_s if timeout_s is None else timeout_s
        deadline = loop.time() + wait_s
        server = self._least_loaded()
        while server is None:
            self._check_open()
            self._waiting += 1
            try:
                self._grow()
                remaining = deadline - loop.time()
                changed = self._changed
                assert changed is not None
                if remaining <= 0:
                    raise FleetFullError(self._full_message(wait_s))
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except asyncio.TimeoutError:
                    raise FleetFullError(self._full_message(wait_s)) from None
            finally:
                self._waiting -= 1
            server = self._least_loaded()
        server.reserved += 1
        client = self.client_class(**server.env.client_kwargs(), **self.client_kwargs)
        # The client's own dead-environment check (no reconnect storm against a dead server,
        # `EnvironmentDiedError` instead of a bare connection error) asks the fleet.
        client.attach_owner(_ServerWatch(self, server))
        try:
            await client._connect_async()
        except BaseException as exc:
            server.reserved -= 1
            self._wake()
            if isinstance(exc, Exception) and not await self._server_alive(server):
                self._lose_server(server)
                raise self._lost_error(server, 1) from exc
            raise
        server.reserved -= 1
        server.sessions.add(client)
        self._placement[client] = server
        if not server.alive:  # lost while this session connected
            self._lost[client] = self._lost_error(server, len(server.sessions))
        return client

    async def release(self, client: AnyClient) -> None:
        """End the session and free its slot (a session of a lost server just goes)."""
        await self._disconnect(client)
        server = self._placement.pop(client, None)
        self._lost.pop(client, None)
        if server is not None:
            server.sessions.discard(client)
        self._wake()

    @contextlib.asynccontextmanager
    async def session(self, timeout_s: Optional[float] = None) -> AsyncIterator[AnyClient]:
        """`async with fleet.session() as env:` a session released on exit."""
        client = await self.acquire(timeout_s)
        try:
            yield client
        finally:
            await self.release(client)

    async def vector(
        self, num_envs: int, *, autoreset: bool = False, timeout_s: Optional[float] = None
    ) -> VectorEnv:
        """`num_envs` sessions stepped together (see `VectorEnv`)."""
        from .vector import VectorEnv

        return await VectorEnv.open(self, num_envs, autoreset=autoreset, timeout_s=timeout_s)

    async def session_error(self, client: AnyClient, exc: BaseException) -> BaseException:
        """What a failed call on `client` means: `ServerLostError` when its server died
        (checked now, not at the next health round), else `exc` itself."""
        server = self._placement.get(client)
        if client not in self._lost:
            if server is None or not is_infrastructure_error(exc):
                return exc
            if await self._server_alive(server):
                return exc
            self._lose_server(server)
        lost = self._lost.get(client)
        if lost is None:
            return exc
        if lost.__cause__ is None:
            lost.__cause__ = exc
        return lost

    def is_lost(self, client: AnyClient) -> bool:
        """True when the server holding this session died: the session cannot continue."""
        return client in self._lost

    def server_of(self, client: AnyClient) -> Optional[StartedEnv]:
        server = self._placement.get(client)
        return server.env if server is not None else None

    def servers(self) -> list[StartedEnv]:
        """The live servers, in the order they joined."""
        return [server.env for server in self._servers]

    def stats(self) -> FleetStats:
        return FleetStats(
            servers=len(self._servers),
            starting=self._starting,
            sessions=sum(len(s.sessions) for s in self._servers),
            capacity=sum(s.capacity for s in self._servers),
            servers_started=self.servers_started,
            servers_lost=self.servers_lost,
            max_creates_per_s=self._limiter.per_s if self._limiter else None,
            load=tuple(len(s.sessions) for s in self._servers),
        )

    @property
    def creations(self) -> int:
        """Server creations that went through the rate limit (every one does)."""
        return self._limiter.granted if self._limiter else 0

    # -- placement ---------------------------------------------------------------------------

    def _least_loaded(self) -> Optional[FleetServer]:
        """The live server with a free slot whose share of its capacity in use is lowest."""
        candidates = [
            s for s in self._servers if s.alive and s.unhealthy_since is None and s.free > 0
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda s: (s.load / s.capacity, s.load))

    def _grow(self) -> None:
        """Start servers for the sessions waiting, up to `max_servers`."""
        while (
            not self._closed
            and len(self._servers) + self._starting < self.max_servers
            and self._starting * self._capacity_hint < self._waiting
        ):
            self._starting += 1  # now: the loop's condition must see this start
            self._spawn(self._add_server(counted=True))

    def _full_message(self, wait_s: float) -> str:
        stats = self.stats()
        return (
            f"no free session in the fleet of {self.spec.target!r} after {wait_s:g} s: "
            f"{stats.sessions}/{stats.capacity} sessions on {stats.servers} servers "
            f"(max_servers={self.max_servers}). Release sessions sooner, raise max_servers or "
            "sessions_per_server, or wait longer (acquire_timeout_s)."
        )

    # -- servers -----------------------------------------------------------------------------

    async def _add_server(self, *, counted: bool = False) -> FleetServer:
        """Start one server through the rate limit; `counted`: the caller already counted it
        in `_starting`."""
        if not counted:
            self._starting += 1
        try:
            assert self._limiter is not None
            await self._limiter.wait_turn()
            self._check_open()
            env = await self.provider.start(self.spec)
            self._envs[env.id] = env
            try:
                self._check_open()
                capacity = await self._server_capacity(env)
            except BaseException:
                self._envs.pop(env.id, None)
                with contextlib.suppress(Exception):
                    await self.provider.stop(env)
                raise
            server = FleetServer(env, capacity)
            self._capacity_hint = capacity
            self._servers.append(server)
            self.servers_started += 1
            logger.debug("fleet: server %s up, %d sessions", env.id, capacity)
            return server
        finally:
            self._starting -= 1
            self._wake()

    async def _server_capacity(self, env: StartedEnv) -> int:
        """Sessions the server holds at once: its `/capacity`, capped by the configuration."""
        reported: Optional[int] = None
        with contextlib.suppress(Exception):
            data = await self._get_json(env, "/capacity")
            reported = int(data["max_sessions"])
        configured = self.sessions_per_server
        if reported is None:
            return configured or 1
        return min(reported, configured) if configured else reported

    async def _get_json(self, env: StartedEnv, path: str) -> Any:
        import httpx

        transport = (
            httpx.AsyncHTTPTransport(uds=env.unix_socket, verify=False) if env.unix_socket else None
        )
        key = self.client_kwargs.get("api_key") or settings.API_KEY.get()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(
            transport=transport, timeout=10.0, trust_env=False, verify=False, headers=headers
        ) as http:
            response = await http.get(env.base_url + path)
            response.raise_for_status()
            return response.json()

    async def _server_alive(self, server: FleetServer) -> bool:
        try:
            return await self.provider.is_running(server.env)
        except Exception:
            return False

    async def _watch(self) -> None:
        """Health rounds. A server its provider reports gone is replaced at once. One whose
        `/health` does not answer gets no new sessions, and is replaced only after
        `unhealthy_after_s` of silence: a server swamped by a thousand handshakes is slow,
        not dead, and killing it would lose every episode on it."""
        assert self.health_interval_s
        while not self._closed:
            await asyncio.sleep(self.health_interval_s)
            try:
                await self._health_round()
            except Exception as exc:  # one odd round must not end the watch
                logger.warning("fleet: health round failed: %s", exc)

    async def _health_round(self) -> None:
        for server in list(self._servers):
            if not await self._server_alive(server):
                self._lose_server(server)
                continue
            status = await self.provider.health_status(server.env)
            now = time.monotonic()
            if status == 200:
                if server.unhealthy_since is not None:
                    server.unhealthy_since = None
                    self._wake()
            elif server.unhealthy_since is None:
                server.unhealthy_since = now  # 503 too: a draining server takes no new sessions
            elif now - server.unhealthy_since >= self.unhealthy_after_s and status != 503:
                self._lose_server(server)

    def _lose_server(self, server: FleetServer) -> None:
        """Take a dead server out: its sessions' episodes fail as infrastructure, what is
        left of it is stopped, and a replacement starts (through the rate limit)."""
        if not server.alive:
            return
        server.alive = False
        if server in self._servers:
            self._servers.remove(server)
        self.servers_lost += 1
        for client in server.sessions:
            self._lost[client] = self._lost_error(server, len(server.sessions))
        logger.warning("%s", self._lost_error(server, len(server.sessions)))
        self._spawn(self._retire(server))
        self._wake()

    async def _retire(self, server: FleetServer) -> None:
        env = self._envs.get(server.env.id)
        if env is not None:
            with contextlib.suppress(Exception):
                await self.provider.stop(env)
            # Forgotten only once stopped: a close() that cancels this stops it again.
            self._envs.pop(env.id, None)
        if not self._closed and len(self._servers) + self._starting < self.target_servers:
            await self._add_server()

    def _lost_error(self, server: FleetServer, sessions: int) -> ServerLostError:
        return ServerLostError(
            f"fleet server {server.env.id} ({self.spec.target}) died with {sessions} sessions "
            "on it: their episodes failed for infrastructure reasons (do not score them). "
            "The fleet replaces the server; reset the session on a new one to continue."
        )

    # -- helpers -----------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)

        def done(finished: asyncio.Task[Any]) -> None:
            self._tasks.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                logger.warning("fleet: background server start failed: %s", finished.exception())

        task.add_done_callback(done)

    def _wake(self) -> None:
        """Tell waiting `acquire()` calls that slots or servers changed."""
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    def _check_open(self) -> None:
        if self._closed:
            raise FleetError("this fleet is closed")

    @staticmethod
    async def _disconnect(client: AnyClient) -> None:
        with contextlib.suppress(Exception):
            await client._close_async()
