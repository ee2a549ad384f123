"""`EnvClient`: the WebSocket client a trainer uses to drive one environment session.

Its methods serve sync and async code alike, as OpenEnv 0.10's do (rules: client_modes.py).

Against an openenv server the client negotiates the `openenv.v1` subprotocol and then tags every
request with an id: replies are matched by id (a timed-out request never shifts later replies),
and when the connection drops the client reconnects, resumes the same session and re-sends what
was unanswered; the server answers a repeated id from its stored replies, so no step is lost or
applied twice. Against an OpenEnv server (no subprotocol) it speaks the plain protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import typing
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from openenv import settings

from .client_modes import DeferredResult, ExecutionMode, MaybeAwaitable, MixedModesError
from .client_types import StepResult
from .env_server.types import Observation, State
from .errors import (
    ConnectionLostError,
    EnvironmentDiedError,
    ProtocolViolationError,
    RequestTimeoutError,
    ServerUnreachableError,
    SessionLostError,
    error_from_data,
)
from .owner import EnvironmentOwner, OpenEnvProviderOwner, PendingClient, start_owned
from .protocol import (
    BINARY_SUBPROTOCOL,
    CLOSE_RESTART,
    EXTENDED_SUBPROTOCOLS,
    RESUME_TOKEN_HEADER,
    SUBPROTOCOL,
    Reply,
    RequestKind,
    decode_reply,
    encode_request,
    session_log_id,
    ws_session_url,
)
from .utils import convert_to_http_url, convert_to_ws_url

#: WebSocket close code of a server that shuts down (RFC 6455 "service restart"): its sessions
#: are gone, reconnect and start anew instead of resuming (protocol.py's `CLOSE_RESTART`).
CLOSE_SERVICE_RESTART = CLOSE_RESTART

if TYPE_CHECKING:
    from typing_extensions import Self
    from websockets.asyncio.client import ClientConnection

    from .sync_client import SyncEnvClient

# `websockets` is imported where a connection is made (about 0.1 s): importing a client stays
# cheap for trainers that import clients in many processes.

logger = logging.getLogger("openenv.client")

ActT = TypeVar("ActT")
ObsT = TypeVar("ObsT")
StateT = TypeVar("StateT")
T = TypeVar("T")

_MODES = ("simulation", "production")


def _resolve_mode(mode: str | None, default: str = "simulation") -> str:
    value = (mode or settings.CLIENT_MODE.get() or default).strip().lower()
    if value not in _MODES:
        raise ValueError(f"mode must be 'simulation' or 'production', got {value!r}")
    return value


class EnvClient(Generic[ActT, ObsT, StateT]):
    """Client for one environment session over `/ws`, from async code (`async with`, `await
    env.reset()`) or sync code (`with`, `env.reset()`), whichever uses it first.

    Subclasses name their types, e.g. `class MyEnv(EnvClient[MyAction, MyObservation, MyState])`,
    and parsing follows; `_step_payload`, `_parse_result` and `_parse_state` stay overridable.
    """

    action_type: ClassVar[type | None] = None
    observation_type: ClassVar[type | None] = None
    state_type: ClassVar[type | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            args = typing.get_args(base)
            if len(args) == 3:
                for attr, arg in zip(
                    ("action_type", "observation_type", "state_type"), args, strict=True
                ):
                    if isinstance(arg, type) and attr not in cls.__dict__:
                        setattr(cls, attr, arg)

    def __init__(
        self,
        base_url: str | None = None,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 60.0,
        max_message_size_mb: float = 100.0,
        provider: Any = None,
        mode: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        ping_interval_s: float | None = 20.0,
        ping_timeout_s: float | None = 20.0,
        close_timeout_s: float = 2.0,
        resume: bool = True,
        max_reconnect_attempts: int = 5,
        reconnect_backoff_s: float = 0.2,
        unix_socket: str | None = None,
        api_key: str | None = None,
        binary_frames: bool = True,
        owner: EnvironmentOwner | None = None,
    ) -> None:
        if base_url is None:
            raise ValueError("base_url is required (e.g. 'http://localhost:8000')")
        self._base_url = convert_to_http_url(base_url)
        self._ws_base = convert_to_ws_url(base_url) + "/ws"
        self._mode = _resolve_mode(mode)
        self.connect_timeout_s = connect_timeout_s
        self.message_timeout_s = message_timeout_s
        self.max_message_size = int(max_message_size_mb * 1024 * 1024)
        self.headers = dict(headers or {})
        # A server started with OPENENV_API_KEY wants it on every request and handshake.
        key = api_key or settings.API_KEY.get()
        if key and not any(name.lower() == "authorization" for name in self.headers):
            self.headers["Authorization"] = f"Bearer {key}"
        self.ping_interval_s = ping_interval_s
        self.ping_timeout_s = ping_timeout_s
        self.close_timeout_s = close_timeout_s
        self.resume = resume
        self.max_reconnect_attempts = max_reconnect_attempts
        self.reconnect_backoff_s = reconnect_backoff_s
        #: OpenEnv's `provider` argument, kept as OpenEnv's client keeps it.
        self._provider = provider
        #: What started this client's environment (`attach_owner`); `close()` stops it.
        self._owner: EnvironmentOwner | None = None
        if owner is not None:
            self.attach_owner(owner)
        elif provider is not None:
            self.attach_owner(OpenEnvProviderOwner(provider))
        #: Reach the server through this Unix socket; `base_url` then only names the host.
        self.unix_socket = unix_socket
        #: Offer `openenv.v1.bin`: observations holding bytes or arrays then arrive as binary
        #: frames, their raw bytes attached instead of base64 text or lists in JSON.
        self.binary_frames = binary_frames
        self._ws: ClientConnection | None = None
        self._extended = False
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[str, asyncio.Future[Reply]]] = {}
        self._ids = itertools.count(1)
        self._rpc_ids = itertools.count(1)
        self._lock: asyncio.Lock | None = None
        self._connect_lock: asyncio.Lock | None = None
        self._recovering: asyncio.Task[None] | None = None
        self._closing = False
        self._session_id: str | None = None
        self._lost_session: str | None = None
        self._session_info: dict[str, Any] = {}
        self._attach_session_id: str | None = None
        self._sync_client: SyncEnvClient[ActT, ObsT, StateT] | None = None
        #: "sync" or "async" once the client is first used (see client_modes.py).
        self._execution_mode: ExecutionMode | None = None
        #: The event loop the connection and its reader task belong to.
        self._ws_loop: asyncio.AbstractEventLoop | None = None

    # -- properties ---------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def session_id(self) -> str | None:
        """The server's id for this session (openenv servers only)."""
        return self._session_id

    @property
    def supports_resume(self) -> bool:
        return self._extended

    @property
    def owner(self) -> EnvironmentOwner | None:
        """What started this client's environment and stops it on `close()` (None: nothing;
        the environment is someone else's to stop)."""
        return self._owner

    def attach_owner(self, owner: EnvironmentOwner) -> None:
        """The environment this client drives was started by `owner`: `close()` stops it, and
        when the connection fails the client asks it whether the environment still runs (a
        dead one raises `EnvironmentDiedError` with its last output, not a connection error).
        """
        if not isinstance(owner, EnvironmentOwner):
            raise TypeError(
                f"{type(owner).__name__} is not an EnvironmentOwner (label, is_running(), "
                "log_tail(), stop())"
            )
        if self._owner is not None and self._owner is not owner:
            raise ValueError(f"this client's environment is already owned by {self._owner.label}")
        self._owner = owner

    # -- connection ---------------------------------------------------------------------

    async def _open(self, session_id: str | None) -> ClientConnection:
        from websockets.asyncio.client import connect, unix_connect
        from websockets.exceptions import InvalidHandshake

        url = ws_session_url(self._ws_base, session_id)
        options: dict[str, Any] = {
            "subprotocols": [BINARY_SUBPROTOCOL, SUBPROTOCOL]
            if self.binary_frames
            else [SUBPROTOCOL],
            "open_timeout": self.connect_timeout_s,
            "max_size": self.max_message_size,
            "ping_interval": self.ping_interval_s,
            "ping_timeout": self.ping_timeout_s,
            # A dead link gives no closing handshake: don't wait long for one.
            "close_timeout": self.close_timeout_s,
            "additional_headers": self._handshake_headers(session_id) or None,
            "compression": None,
        }
        try:
            if self.unix_socket:
                return await unix_connect(self.unix_socket, url, **options)
            return await connect(url, proxy=None, **options)
        except (OSError, InvalidHandshake, asyncio.TimeoutError) as exc:
            where = self._ws_base + (f" (via {self.unix_socket})" if self.unix_socket else "")
            raise ServerUnreachableError(
                f"Failed to connect to {where}: {exc or type(exc).__name__}. Is the "
                "environment server running at this address (try GET /health)?"
            ) from exc

    def _handshake_headers(self, session_id: str | None) -> dict[str, str]:
        headers = dict(self.headers)
        token = self._session_info.get("resume_token")
        if session_id and token and session_id == self._session_info.get("session_id"):
            headers[RESUME_TOKEN_HEADER] = str(token)
        return headers

    async def _connect_async(self) -> Self:
        await self._leave_foreign_loop()
        if self._ws is not None:
            return self
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._ws is not None:
                return self
            self._closing = False
            ws = await self._open(self._attach_session_id)
            self._ws = ws
            self._ws_loop = asyncio.get_running_loop()
            self._extended = ws.subprotocol in EXTENDED_SUBPROTOCOLS
            if self._extended:
                self._reader = asyncio.get_running_loop().create_task(self._read_loop(ws))
        return self

    async def _disconnect_async(self) -> None:
        await self._leave_foreign_loop()
        self._closing = True
        ws, self._ws = self._ws, None
        if self._recovering is not None:
            self._recovering.cancel()
            self._recovering = None
        if ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.send(encode_request("close")), 2.0)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 2.0)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
            self._reader = None
        self._fail_pending(ConnectionLostError("Client disconnected"))
        self._session_id = None
        self._lost_session = None

    async def _close_async(self) -> None:
        await self._disconnect_async()
        owner, self._owner = self._owner, None
        self._provider = None
        if owner is not None:
            await owner.stop()

    # -- starting an environment -----------------------------------------------------------

    @classmethod
    def from_env(
        cls,
        name_or_folder: str,
        *,
        provider: Any = None,
        use_docker: bool | None = None,
        **kwargs: Any,
    ) -> PendingClient[Self]:
        """Start an environment (installed name, folder or app import string) and return a
        client that stops it on close: `await`, `async with`, or `.sync()` it.

        `provider` is a provider name ('local', the default; 'sandbox', 'uv', 'docker',
        'swarm') or instance. `use_docker=True` runs the environment's image instead.
        Keyword arguments: `env_vars`, `limits`, `network`, `port`, `ready_timeout_s` (or
        OpenEnv's `wait_timeout`) for the environment; client options for the client.
        """
        default = "docker" if use_docker else "local"
        return PendingClient(
            lambda: start_owned(cls, name_or_folder, provider, default, dict(kwargs))
        )

    @classmethod
    def from_docker_image(
        cls, image: str, provider: Any = None, **kwargs: Any
    ) -> PendingClient[Self]:
        """Run `image` (hardened: see docs/providers.md) and return a client that removes the
        container on close: `await`, `async with`, or `.sync()` it."""
        return PendingClient(lambda: start_owned(cls, image, provider, "docker", dict(kwargs)))

    async def _own_environment_is_gone(self) -> bool:
        owner = self._owner
        if owner is None:
            return False
        try:
            return not await owner.is_running()
        except Exception:
            return False

    async def _environment_died(self, exc: BaseException) -> BaseException:
        """When this client's own environment is gone, say so (an infrastructure failure with
        the environment's last output) instead of reporting a mere connection problem."""
        owner = self._owner
        if owner is None or not await self._own_environment_is_gone():
            return exc
        log = ""
        with contextlib.suppress(Exception):
            log = await owner.log_tail()
        died = EnvironmentDiedError(
            f"{owner.label} is gone: it crashed, was killed or ran out of its limits. This "
            "episode failed for infrastructure reasons; start a new environment to continue."
            + (f"\n--- last lines of its output ---\n{log}" if log else "")
        )
        died.__cause__ = exc
        return died

    async def __aenter__(self) -> Self:
        self._claim_mode("async")
        return await self._connect_async()

    async def __aexit__(self, *exc: Any) -> None:
        await self._close_async()

    def __enter__(self) -> Self:
        """Sync code: `with EchoEnv(base_url=url) as env:` connects on the private loop thread."""
        self._run_blocking(self._connect_async)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._run_blocking(self._close_async, last=True)

    def sync(self) -> SyncEnvClient[ActT, ObsT, StateT]:
        """A blocking wrapper with exact static types (`with EchoEnv(...).sync() as env:`);
        it also makes every coroutine method blocking (`list_tools`, `call_tool`, ...)."""
        from .sync_client import SyncEnvClient

        if self._sync_client is None:
            self._sync_client = SyncEnvClient(self)
        return self._sync_client

    # -- one client for sync and async code (see client_modes.py) ----------------------------

    def _claim_mode(self, mode: ExecutionMode) -> None:
        """Fix the client to sync or async callers on first use; refuse the other kind."""
        if self._execution_mode is None:
            self._execution_mode = mode
        elif self._execution_mode != mode:
            name = type(self).__name__
            raise MixedModesError(
                f"This {name} is used from {self._execution_mode} code and cannot also be used "
                f"from {mode} code: its connection lives on one event loop. Use a separate "
                f"{name} for the {mode} code."
            )

    def _run_blocking(
        self,
        start: Callable[[], Coroutine[Any, Any, T]],
        *,
        handoff: bool = False,
        last: bool = False,
    ) -> T:
        """Run `start()` on the private loop thread (the `.sync()` machinery) and wait.

        `handoff`: a client used async whose loop has ended (no loop runs here) may move to
        sync use. `last`: the client is closed, so stop its loop thread too.
        """
        if handoff and self._execution_mode == "async":
            self._execution_mode = "sync"
        self._claim_mode("sync")
        wrapper = self.sync()
        try:
            return wrapper._run(start())
        finally:
            if last:
                wrapper._stop_loop()

    def _dispatch(self, start: Callable[[], Coroutine[Any, Any, T]], *, last: bool = False) -> Any:
        """The result in sync code, an awaitable in async code (rules: client_modes.py)."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        mode = self._execution_mode
        if loop is None:
            return self._run_blocking(start, handoff=True, last=last)
        if mode == "async":
            return start()
        if mode == "sync":
            private = self._sync_client._loop if self._sync_client is not None else None
            if loop is private:
                return start()  # a call made by the client's own code on its loop thread
            # Sync code that runs inside an event loop (a notebook cell): block it.
            return self._run_blocking(start, last=last)
        return DeferredResult(self, start, last=last)

    # -- the Gym-style API (dual-mode: await it in async code, call it in sync code) ----------

    def connect(self) -> MaybeAwaitable[Self]:
        """Open the connection (idempotent); a session is created or attached on the server."""
        return self._dispatch(self._connect_async)

    def disconnect(self) -> MaybeAwaitable[None]:
        """End the session: send `close` and close the connection."""
        return self._dispatch(self._disconnect_async)

    def close(self) -> MaybeAwaitable[None]:
        """Disconnect and stop the environment (process, sandbox, container) this client
        started, if any."""
        return self._dispatch(self._close_async, last=True)

    def reset(self, **kwargs: Any) -> MaybeAwaitable[StepResult[ObsT]]:
        """Start an episode; keyword arguments (seed, episode_id, ...) go to the env's reset."""
        return self._dispatch(lambda: self._reset_async(**kwargs))

    def step(self, action: ActT, **kwargs: Any) -> MaybeAwaitable[StepResult[ObsT]]:
        """Apply `action`; keyword arguments (e.g. `timeout_s`) go to the env's step.

        OpenEnv's plain protocol has no place for them: against such a server they raise
        TypeError rather than being dropped.
        """
        return self._dispatch(lambda: self._step_async(action, **kwargs))

    def state(self) -> MaybeAwaitable[StateT]:
        """The environment's state."""
        return self._dispatch(self._state_async)

    # -- extended protocol: id-tagged requests and resume ---------------------------------

    async def _read_loop(self, ws: ClientConnection) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for raw in ws:
                try:
                    reply = decode_reply(raw)
                except ValueError as exc:
                    self._fail_pending(ProtocolViolationError(str(exc)))
                    continue
                if reply.kind == "session":
                    self._session_info = reply.data
                    self._session_id = reply.data.get("session_id")
                    continue
                rid = reply.id
                entry = self._pending.pop(rid, None) if isinstance(rid, int) else None
                if entry is not None:
                    if not entry[1].done():
                        entry[1].set_result(reply)
                elif reply.is_error:
                    # An error without an id comes before the session exists (capacity, factory)
                    # or for a frame the server could not parse: it fails every waiting request.
                    self._fail_pending(error_from_data(reply.data))
        except ConnectionClosed:
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("openenv client reader failed")
        if ws is self._ws and not self._closing:
            self._ws = None
            if ws.close_code == CLOSE_SERVICE_RESTART:
                # The server is shutting down and took its sessions along: resuming here cannot
                # work. Retryable: the next reset() opens a new session (wherever the URL leads).
                self._mark_lost()
                self._lost_session = (
                    f"{self._lost_session} (the server shut down: close {CLOSE_SERVICE_RESTART})"
                )
                self._fail_pending(
                    ConnectionLostError(
                        f"The environment server is shutting down (close {CLOSE_SERVICE_RESTART}: "
                        f"{ws.close_reason or 'service restart'}); the session ended. Call reset() "
                        "to start a new session."
                    )
                )
            elif self._pending or self.resume:
                self._recovering = asyncio.get_running_loop().create_task(self._recover())

    async def _recover(self) -> None:
        """Reconnect, resume the session and re-send unanswered requests."""
        from websockets.exceptions import ConnectionClosed

        session_id = self._session_id
        if not self.resume or session_id is None:
            self._mark_lost()
            self._fail_pending(
                ConnectionLostError("Connection to the environment server dropped; session lost")
            )
            return
        last_exc: BaseException | None = None
        for attempt in range(self.max_reconnect_attempts):
            if self._closing:
                return
            try:
                ws = await self._open(session_id)
                first = decode_reply(await asyncio.wait_for(ws.recv(), self.connect_timeout_s))
            except (ConnectionError, ConnectionClosed, asyncio.TimeoutError, OSError) as exc:
                last_exc = exc
                if await self._own_environment_is_gone():
                    break  # no point in retrying: the failure says why
                await asyncio.sleep(self.reconnect_backoff_s * (2**attempt))
                continue
            except ValueError as exc:
                first = Reply("error", {"message": str(exc), "code": "SESSION_ERROR"}, None)
            if first.kind != "session":
                with contextlib.suppress(Exception):
                    await ws.close()
                data = first.data
                self._mark_lost()
                self._fail_pending(
                    SessionLostError(
                        f"Session {session_id} could not be resumed: {data.get('message')}",
                        str(data.get("code", "SESSION_ERROR")),
                        data,
                    )
                )
                return
            self._session_info = first.data
            self._ws = ws
            self._ws_loop = asyncio.get_running_loop()
            self._reader = asyncio.get_running_loop().create_task(self._read_loop(ws))
            logger.info("Resumed session %s after a dropped connection", session_log_id(session_id))
            for rid in sorted(self._pending):
                with contextlib.suppress(ConnectionClosed):
                    await ws.send(self._pending[rid][0])
            return
        self._mark_lost()
        self._fail_pending(
            ConnectionLostError(
                f"Could not reconnect to {self._ws_base} after {self.max_reconnect_attempts} "
                f"attempts: {last_exc}"
            )
        )

    def _mark_lost(self) -> None:
        """The server's session is gone: only a new episode (reset) may continue."""
        self._lost_session = self._session_id or "unknown"
        self._session_id = None

    def _fail_pending(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, {}
        for _, fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    async def _leave_foreign_loop(self) -> None:
        """Move the connection to the running event loop if it was made on another one.

        A client connected inside `asyncio.run()` and then used from sync code (its private
        loop thread) cannot use that loop's socket, reader task or locks here. The socket is
        left behind and the session resumed on this loop (the server hands the session to the
        new connection); without resume the session is lost and only `reset()` continues.
        """
        loop = asyncio.get_running_loop()
        old = self._ws_loop
        if old is None or old is loop:
            return
        self._ws_loop = None
        ws, self._ws = self._ws, None
        self._reader = self._recovering = None
        self._pending = {}
        self._lock = self._connect_lock = None
        if ws is None or self._closing:
            return
        if self.resume and self._session_id is not None:
            await self._recover()
            return
        self._mark_lost()
        self._lost_session = "(connected on an event loop that has ended)"

    async def _wait_connected(self, kind: str) -> None:
        await self._leave_foreign_loop()
        if self._ws is None and self._recovering is not None and not self._recovering.done():
            await asyncio.shield(self._recovering)
        if self._ws is None:
            lost = self._lost_session
            if lost is not None and kind != "reset":
                raise SessionLostError(
                    f"Session {lost} was lost with its connection; call reset() to start a new "
                    "episode in a new session",
                    "SESSION_NOT_FOUND",
                )
            self._lost_session = None
            await self._connect_async()

    async def _request(
        self, kind: RequestKind, data: Any = None, options: dict[str, Any] | None = None
    ) -> Reply:
        try:
            return await self._request_once(kind, data, options)
        except (ConnectionError, SessionLostError, RequestTimeoutError) as exc:
            died = await self._environment_died(exc)
            if died is exc:
                raise
            raise died from exc

    async def _request_once(
        self, kind: RequestKind, data: Any = None, options: dict[str, Any] | None = None
    ) -> Reply:
        from websockets.exceptions import ConnectionClosed

        await self._wait_connected(kind)
        if not self._extended:
            if options:
                raise TypeError(
                    f"step() keyword arguments {sorted(options)} cannot be sent: this server "
                    "speaks OpenEnv's plain protocol, whose step frame carries only the action"
                )
            reply = await self._request_plain(kind, encode_request(kind, data))
        else:
            rid = next(self._ids)
            frame = encode_request(kind, data, rid, options)
            fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
            self._pending[rid] = (frame, fut)
            ws = self._ws
            if ws is not None:
                with contextlib.suppress(ConnectionClosed):
                    await ws.send(frame)  # a drop is healed by _recover
            try:
                reply = await asyncio.wait_for(asyncio.shield(fut), self.message_timeout_s)
            except asyncio.TimeoutError:
                self._pending.pop(rid, None)
                raise RequestTimeoutError(
                    f"No reply to {kind} within {self.message_timeout_s:g}s"
                ) from None
        if reply.is_error:
            raise error_from_data(reply.data)
        return reply

    async def _request_plain(self, kind: str, frame: str) -> Reply:
        """OpenEnv servers: strict lockstep; a timeout drops the connection to avoid desync."""
        from websockets.exceptions import ConnectionClosed

        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._ws is None:
                await self._connect_async()
            ws = self._ws
            assert ws is not None
            try:
                try:
                    await ws.send(frame)
                except ConnectionClosed:
                    # The server may have refused the session (capacity, factory) and closed;
                    # its error frame is still buffered and says why.
                    raw = await asyncio.wait_for(ws.recv(), 1.0)
                    return self._decode(raw)
                raw = await asyncio.wait_for(ws.recv(), self.message_timeout_s)
            except asyncio.TimeoutError:
                self._ws = None
                self._lost_session = "the previous session"
                with contextlib.suppress(Exception):
                    await ws.close()
                raise RequestTimeoutError(
                    f"No reply to {kind} within {self.message_timeout_s:g}s; "
                    "the connection was closed (this server cannot match late replies)"
                ) from None
            except ConnectionClosed as exc:
                self._ws = None
                self._lost_session = "the previous session"
                raise ConnectionLostError(f"Connection to {self._ws_base} closed: {exc}") from exc
            return self._decode(raw)

    @staticmethod
    def _decode(raw: str | bytes) -> Reply:
        try:
            return decode_reply(raw)
        except ValueError as exc:
            raise ProtocolViolationError(str(exc)) from None

    # -- the async implementations behind the dual-mode methods ------------------------------

    async def _reset_async(self, **kwargs: Any) -> StepResult[ObsT]:
        reply = await self._request("reset", kwargs)
        return self._parse_result(reply.data)

    async def _step_async(self, action: ActT, **kwargs: Any) -> StepResult[ObsT]:
        reply = await self._request("step", self._step_payload(action), kwargs or None)
        return self._parse_result(reply.data)

    async def _state_async(self) -> StateT:
        reply = await self._request("state")
        return self._parse_state(reply.data)

    async def mcp_request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """A JSON-RPC call tunnelled over this session's WebSocket (`{"type":"mcp"}`)."""
        rpc = {
            "jsonrpc": "2.0",
            "id": next(self._rpc_ids),
            "method": method,
            "params": params or {},
        }
        reply = await self._request("mcp", rpc)
        return reply.data

    # -- parse hooks ----------------------------------------------------------------------

    def _step_payload(self, action: ActT) -> dict[str, Any]:
        if isinstance(action, dict):
            return dict(action)
        if hasattr(action, "model_dump"):
            payload = action.model_dump(mode="json")
            if not payload.get("metadata"):
                payload.pop("metadata", None)
            return payload
        return dict(vars(action))

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[ObsT]:
        obs_data = dict(payload.get("observation") or {})
        inner_meta = obs_data.pop("metadata", None)
        metadata = payload.get("metadata") or inner_meta or {}
        reward = payload.get("reward")
        done = bool(payload.get("done", False))
        cls = self.observation_type
        if cls is not None and isinstance(cls, type) and issubclass(cls, Observation):
            observation: Any = cls.model_validate(
                {**obs_data, "reward": reward, "done": done, "metadata": metadata}
            )
        else:
            observation = dict(payload.get("observation") or {})
        return StepResult(observation=observation, reward=reward, done=done, metadata=metadata)

    def _parse_state(self, payload: dict[str, Any]) -> StateT:
        cls = self.state_type
        if cls is not None and isinstance(cls, type) and issubclass(cls, State):
            return cls.model_validate(payload)  # type: ignore[return-value]
        return payload  # type: ignore[return-value]
