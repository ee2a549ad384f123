"""Session lifecycle: slots, a bounded wait queue, the idle reaper and ordered env calls.

One `SessionManager` per server. A session owns one environment instance. Its calls run one
at a time (an asyncio lock, no thread per session); sync environment methods run on a shared
thread pool so they never block the event loop, async ones run on the loop itself.

Every environment call has a server-side deadline (`ServerConfig.timeout_for`). A call past it
gets a TIMEOUT error and its session ends at once (slot freed, later calls told why): a sync
call's thread is abandoned to the dispatcher (it closes the environment if the call ever
returns), an async call is cancelled. On SIGTERM, `drain` refuses new work, waits up to the
grace period for calls in flight, ends the rest the same way, and closes every session.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import secrets
import sys
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar, Union

from ..errors import (
    CallTimeoutError,
    CapacityReachedError,
    EnvironmentExecutionError,
    FactoryError,
    OpenEnvError,
    ReplyEvictedError,
    ServerError,
    SessionExpiredError,
    SessionLostError,
    exception_message,
)
from ..protocol import (
    CLOSE_IDLE_TIMEOUT,
    CLOSE_NORMAL,
    CLOSE_RESTART,
    CLOSE_SHUTDOWN,
    EncodedReply,
    RequestId,
    session_log_id,
)
from ..protocol import CLOSE_TAKEN_OVER as CLOSE_TAKEN_OVER  # re-exported (defined in protocol)
from .config import DEFAULT_CONCURRENT_SESSIONS, ServerConfig
from .connections import close_websocket_soon, wait_closing
from .dispatch import CallDispatcher
from .errors import ConcurrencyConfigurationError
from .interfaces import Environment, overrides, session_context_of
from .metrics import ServerMetrics, make_tracer
from .rewards import reset_rubric, score_step
from .session_gc import SessionHeapFreezer, sized_young_generation
from .types import Action, Observation, ServerCapacityStatus, SessionInfo, State
from .workers import worker_prefix

if TYPE_CHECKING:
    from .mcp_environment import MCPEnvironment

logger = logging.getLogger("openenv.server")

T = TypeVar("T")
#: What a request came to: its encoded reply, or the error it raised.
Outcome = Union[EncodedReply, ServerError]

# The WebSocket close codes a server ends a session with (CLOSE_*) are protocol.py's; they stay
# importable from here.
#: The close reason that goes with `CLOSE_RESTART` (server shutting down).
RESTART_REASON = "server shutting down; start a new session (on another server)"
#: Ids of sessions ended by a hung call, remembered so that a later call learns why.
_ENDED_REMEMBERED = 1024


def _declares_infrastructure(exc: Exception) -> bool:
    """Whether the error's class says it is an infrastructure failure (`HarnessError`,
    ...), rather than only inheriting `OpenEnvError`'s default."""
    return (
        isinstance(exc, OpenEnvError)
        and any(
            "category" in vars(klass) and klass is not OpenEnvError
            for klass in type(exc).__mro__
            if issubclass(klass, OpenEnvError)
        )
        and exc.category == "infrastructure"
    )


def factory_class(factory: Callable[..., Any]) -> type | None:
    """The class a factory builds, when it can be known without calling it."""
    if isinstance(factory, type):
        return factory
    if isinstance(factory, functools.partial):
        return factory_class(factory.func)
    hint = inspect.signature(factory).return_annotation if callable(factory) else None
    return hint if isinstance(hint, type) else None


def factory_name(factory: Callable[..., Any]) -> str:
    cls = factory_class(factory)
    if cls is not None:
        return cls.__name__
    return getattr(factory, "__name__", type(factory).__name__)


@functools.lru_cache(maxsize=256)
def _accepted_kwargs(method: Callable[..., Any]) -> frozenset[str] | None:
    """Names a method accepts, or None when it takes **kwargs (accepts everything)."""
    params = inspect.signature(method).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )


def filter_kwargs(method: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Drop keyword arguments the method does not declare (OpenEnv's signature flexibility)."""
    if not kwargs:
        return kwargs
    accepted = _accepted_kwargs(getattr(method, "__func__", method))
    if accepted is None:
        return kwargs
    return {k: v for k, v in kwargs.items() if k in accepted}


def _replayable(exc: Exception) -> ServerError:
    """The error to store for a re-sent request: its code, message and data, without the
    traceback and causes (which would keep the failed call's frames alive)."""
    if isinstance(exc, ServerError):
        return ServerError(exc.message, exc.code, exc.to_data())
    return ServerError(f"Internal error: {exception_message(exc)}")


def _outcome_size(outcome: Outcome) -> int:
    if isinstance(outcome, EncodedReply):
        return 64 + len(outcome.payload) + sum(len(blob) for blob in outcome.blobs)
    return 256 + len(outcome.message) + sum(len(str(v)) for v in outcome.data.values())


class SlotPool:
    """Counts sessions against a limit; callers over it wait in a bounded FIFO queue."""

    def __init__(self, size: int, max_waiters: int) -> None:
        self.size = size
        self.max_waiters = max_waiters
        self.used = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        #: `openenv_sessions_queued` when metrics are on.
        self.queued_gauge: Any = None

    def has_free_slot(self) -> bool:
        return self.used < self.size and not self._waiters

    @property
    def queued(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def acquire(self, timeout: float) -> None:
        if self.used < self.size and not self._waiters:
            self.used += 1
            return
        if self.queued >= self.max_waiters or timeout <= 0:
            raise self._full()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        gauge = self.queued_gauge
        if gauge is not None:
            gauge.inc()
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot arrived as we gave up: hand it on
            else:
                fut.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(fut)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise self._full(waited=timeout) from None
        finally:
            if gauge is not None:
                gauge.dec()

    def refuse_waiters(self, error: BaseException) -> None:
        """Fail every queued acquire with `error` (the server is shutting down)."""
        waiters, self._waiters = self._waiters, deque()
        for fut in waiters:
            if not fut.done():
                fut.set_exception(error)

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes straight to the next waiter
                return
        self.used -= 1

    def _full(self, waited: float = 0.0) -> CapacityReachedError:
        suffix = f" after waiting {waited:g}s" if waited else ""
        return CapacityReachedError(
            f"Server at capacity: {self.used}/{self.size} sessions active{suffix}. "
            "Cannot accept new connections.",
            active_sessions=self.used,
            max_sessions=self.size,
        )


class Session:
    """One environment instance and what the server knows about it."""

    __slots__ = (
        "_closed",
        "_lock",
        "busy",
        "call_task",
        "call_timed_out",
        "closed_reason",
        "created_at",
        "deadline",
        "detached_at",
        "env",
        "env_seconds",
        "exit_stack",
        "id",
        "inflight",
        "last_activity",
        "pending",
        "replay_size",
        "replies",
        "resumable",
        "resume_token",
        "step_count",
        "transport",
        "waiter",
        "websocket",
    )

    def __init__(self, session_id: str, transport: str) -> None:
        now = time.monotonic()
        self.id = session_id
        self.transport = transport
        self.env: Environment | None = None
        #: Seconds the last reset/step spent in the environment (metrics on), for the overhead.
        self.env_seconds: float | None = None
        self.created_at = time.time()
        self.last_activity = now
        self.step_count = 0
        self.busy = 0
        self._lock: asyncio.Lock | None = None
        self._closed = False
        self.closed_reason: str | None = None
        #: The task running the current call, the dispatcher future it awaits (a sync call),
        #: and the TIMEOUT error once its deadline passed.
        self.call_task: asyncio.Task[Any] | None = None
        self.pending: asyncio.Future[Any] | None = None
        self.call_timed_out: CallTimeoutError | None = None
        #: What the caller of a detached (async) call awaits: set when it ends or expires.
        self.waiter: asyncio.Future[None] | None = None
        #: (monotonic deadline, call kind, timeout) of the call running, read by the watchdog.
        self.deadline: tuple[float, str, float] | None = None
        self.exit_stack: contextlib.AsyncExitStack | None = None
        # Resume support (WebSocket sessions that asked for it).
        self.resumable = False
        self.resume_token: str | None = None
        self.websocket: Any = None
        self.detached_at: float | None = None
        # Outcomes of requests by id, so a re-sent request is answered, not applied again:
        # an encoded reply, an error, or None once dropped for room (`replay_size` bytes kept).
        self.replies: OrderedDict[RequestId, Outcome | None] | None = None
        self.replay_size = 0
        self.inflight: dict[RequestId, asyncio.Future[Outcome]] | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def make_resumable(self) -> None:
        if not self.resumable:
            self.resumable = True
            self.resume_token = secrets.token_urlsafe(18)

    def info(self) -> SessionInfo:
        elapsed = time.monotonic() - self.last_activity
        return SessionInfo(
            session_id=self.id,
            created_at=self.created_at,
            last_activity_at=time.time() - elapsed,
            step_count=self.step_count,
            environment_type=type(self.env).__name__ if self.env is not None else "",
            transport=self.transport,  # type: ignore[arg-type]
        )


class SessionManager:
    """Creates, runs and ends sessions for one environment factory."""

    def __init__(self, factory: Callable[..., Environment], config: ServerConfig) -> None:
        if isinstance(factory, Environment) or not callable(factory):
            raise TypeError(
                "env must be a callable factory (an Environment class, a function or a "
                f"functools.partial), not an instance of {type(factory).__name__}"
            )
        self.factory = factory
        self.factory_name = factory_name(factory)
        #: Keeps live sessions' objects out of full garbage collections (session_gc.py).
        self.heap_freezer = SessionHeapFreezer()
        #: Sizes the collector's young generation to the live sessions (session_gc.py).
        self.young_generation = sized_young_generation()
        self.env_class = factory_class(factory)
        self.config = config
        safe = getattr(self.env_class, "SUPPORTS_CONCURRENT_SESSIONS", None)
        limit = config.max_concurrent_envs
        if limit is None:
            limit = DEFAULT_CONCURRENT_SESSIONS if safe else 1
        if limit > 1 and safe is False:
            raise ConcurrencyConfigurationError(
                f"{self.factory_name} does not declare SUPPORTS_CONCURRENT_SESSIONS = True, so it "
                f"cannot be served with max_concurrent_envs={limit}. Set the class attribute if "
                "instances are independent, or serve one session at a time."
            )
        self._safety_checked = safe is not None
        self.slots = SlotPool(limit, config.max_queued)
        self.sessions: dict[str, Session] = {}
        #: Sessions with a call running (HTTP stateless ones included), for shutdown.
        self.running: set[Session] = set()
        self.draining = False
        self._all_done: asyncio.Event | None = None  # set when `running` empties while draining
        #: session id -> (transport, why) of sessions a hung call ended, the latest ones.
        self._ended: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._timeouts = {k: config.timeout_for(k) for k in ("reset", "step", "state", "call")}
        self._close_timeout: float | None = self._timeouts["call"]
        self._watchdog: asyncio.Task[None] | None = None
        single = getattr(self.env_class, "REQUIRES_SINGLE_THREAD_EXECUTOR", False)
        # Threads start on demand: the pool only grows to as many sync calls as block at once.
        workers = 1 if single else config.max_threads
        idle = config.thread_idle_s
        self.dispatcher = CallDispatcher(workers, idle_timeout=idle if idle > 0 else None)
        self._reaper: asyncio.Task[None] | None = None
        self._id_prefix = worker_prefix()
        self._method_kinds: dict[tuple[type, str], bool] = {}
        #: Server mode given to MCP environments so mode-specific tools match the server.
        self.env_mode: str | None = None
        #: Prometheus metrics and OpenTelemetry spans; None (nothing imported) when off.
        self.metrics: ServerMetrics | None = ServerMetrics() if config.metrics else None
        self.tracer = make_tracer(config.tracing)
        if self.metrics is not None:
            self.slots.queued_gauge = self.metrics.sessions_queued

    # -- lifecycle --------------------------------------------------------------------

    @property
    def max_sessions(self) -> int:
        return self.slots.size

    def capacity(self) -> ServerCapacityStatus:
        return ServerCapacityStatus(
            active_sessions=min(self.slots.used, self.slots.size),
            max_sessions=self.slots.size,
            queued=self.slots.queued,
        )

    def new_session_id(self) -> str:
        return f"{self._id_prefix}{uuid.uuid4()}"

    def refuse_if_draining(self) -> None:
        if self.draining:
            raise CapacityReachedError(
                "Server is shutting down and accepts no new sessions; connect to another server.",
                active_sessions=self.slots.used,
                max_sessions=self.slots.size,
            )

    async def create(self, transport: str, *, wait: bool = True) -> Session:
        """Reserve a slot (waiting in the queue if allowed) and build the environment."""
        await self._acquire_slot(self.config.queue_timeout_s if wait else 0.0)
        self.ensure_reaper()
        session = Session(self.new_session_id(), transport)
        try:
            session.env = await self.build_env()
            await self._enter_session_context(session)
        except BaseException:
            self.slots.release()
            if session.env is not None:
                await self._close_env(session)
            raise
        self.sessions[session.id] = session
        if self.metrics is not None:
            self.metrics.session_opened(transport)
        self.heap_freezer.opened(len(self.sessions))
        if self.young_generation is not None:
            self.young_generation.update(self, len(self.sessions))
        return session

    async def _acquire_slot(self, timeout: float) -> None:
        """A slot for a new environment; CAPACITY_REACHED (counted as refused) if none."""
        try:
            self.refuse_if_draining()
            await self.slots.acquire(timeout)
        except CapacityReachedError:
            if self.metrics is not None:
                reason = "draining" if self.draining else "capacity"
                self.metrics.refused(reason)
            raise

    @staticmethod
    async def _enter_session_context(session: Session) -> None:
        """Enter the environment's session context (OpenEnv's `mcp_session`), held until the
        session ends."""
        context = session_context_of(session.env)
        if context is not None:
            session.exit_stack = contextlib.AsyncExitStack()
            await session.exit_stack.enter_async_context(context)

    async def build_env(self) -> Environment:
        """Call the factory off the event loop; failures become FACTORY_ERROR."""
        built: list[Environment] = []

        def build() -> Environment:
            built.append(self.factory())
            return built[-1]

        def close_late() -> None:  # the factory returned after its deadline
            for env in built:
                env.close()

        try:
            env = await self.run_bounded(build, self._timeouts["call"], "factory", close_late)
        except CallTimeoutError:
            raise
        except Exception as exc:
            logger.exception("Environment factory %s failed", self.factory_name)
            raise FactoryError(
                f"Environment factory '{self.factory_name}' failed to create instance: "
                f"{exception_message(exc)}",
                factory_name=self.factory_name,
            ) from exc
        if self.env_mode is not None and _is_mcp_environment(env):
            env.mode = self.env_mode
        if not self._safety_checked:
            self._safety_checked = True
            if self.slots.size > 1 and not getattr(env, "SUPPORTS_CONCURRENT_SESSIONS", False):
                await self.run_bounded(env.close, self._close_timeout, "close")
                raise FactoryError(
                    f"{type(env).__name__} does not declare SUPPORTS_CONCURRENT_SESSIONS = True; "
                    f"serve it with max_concurrent_envs=1.",
                    factory_name=self.factory_name,
                )
        return env

    def get(self, session_id: str, *, by: str | None = None) -> Session:
        """The live session `session_id`. With `by` (the transport asking), a session that a
        WebSocket connection owns is not handed to another transport: knowing its id is not
        enough to act on it (it answers as unknown, so its existence is not revealed)."""
        session = self.sessions.get(session_id)
        if session is not None and by is not None and by != "ws" and session.transport == "ws":
            session = None
        if session is None and session_id in self._ended:
            transport, reason = self._ended[session_id]
            if by is None or by == "ws" or transport != "ws":
                raise self._ended_error(session_id, reason)
        if session is None or session.closed:
            raise SessionLostError(
                f"Unknown session_id: {session_id}. It was closed, expired, or never existed; "
                "start a new episode with a new session."
            )
        return session

    async def destroy(
        self, session: Session, reason: str = "closed", ws_code: int = CLOSE_NORMAL
    ) -> None:
        """End a session exactly once: close its socket, its environment, free its slot."""
        if session._closed:
            return
        session._closed = True
        session.closed_reason = reason
        if self.sessions.pop(session.id, None) is not None and self.metrics is not None:
            self.metrics.session_closed(session)
        ws = session.websocket
        session.websocket = None
        try:
            if ws is not None:
                # On its own task, bounded: a client that does not read must not hold up the
                # caller (the reaper serves every session).
                close_websocket_soon(ws, ws_code, reason[:120])
            await self._close_env(session)
        finally:
            if session.inflight:
                for fut in session.inflight.values():
                    if not fut.done():
                        fut.cancel()
            self.slots.release()
            self.heap_freezer.closed(len(self.sessions))
            if self.young_generation is not None:
                self.young_generation.update(self, len(self.sessions))

    async def _close_env(self, session: Session) -> None:
        env, session.env = session.env, None
        if session.exit_stack is not None:
            stack, session.exit_stack = session.exit_stack, None
            try:
                await stack.aclose()
            except Exception:
                logger.exception("Closing MCP session of %s failed", session_log_id(session.id))
        if env is None:
            return
        try:
            await self.run_bounded(env.close, self._close_timeout, "close")
        except Exception:
            logger.exception(
                "close() of environment in session %s raised", session_log_id(session.id)
            )

    async def shutdown(
        self, ws_code: int = CLOSE_SHUTDOWN, reason: str = "server shutting down"
    ) -> None:
        for task in (self._reaper, self._watchdog):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._reaper = self._watchdog = None
        self.draining = True
        self._expire_all("the server shut down before the call finished")
        sessions = list(self.sessions.values())
        if sessions:  # closes run side by side: one slow close() does not hold up the others
            await asyncio.gather(
                *(self.destroy(s, reason, ws_code) for s in sessions), return_exceptions=True
            )
        await wait_closing(self._close_timeout)
        self.dispatcher.shutdown()

    async def drain(self, grace: float) -> None:
        """Graceful shutdown: refuse new sessions and calls, let calls in flight finish (their
        replies are sent) for up to `grace` seconds, end the rest with TIMEOUT, then close every
        session; WebSocket clients get `CLOSE_RESTART` (1012: reconnect elsewhere)."""
        self.draining = True
        self.slots.refuse_waiters(self._draining_error())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        if self.running:
            self._all_done = asyncio.Event()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._all_done.wait(), grace)
        # Calls still running are given up; a close() gets what is left of the grace period.
        self._close_timeout = max(0.5, deadline - loop.time())
        if self.running:
            self._expire_all(f"the server shut down; the call did not finish within {grace:g}s")
            for _ in range(20):  # let the handlers send the TIMEOUT replies
                if not self.running:
                    break
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # replies of the last calls reach their sockets first
        await self.shutdown(CLOSE_RESTART, RESTART_REASON)

    def _draining_error(self) -> CapacityReachedError:
        return CapacityReachedError(
            "Server is shutting down and accepts no new sessions; connect to another server.",
            active_sessions=self.slots.used,
            max_sessions=self.slots.size,
        )

    # -- the idle reaper ----------------------------------------------------------------

    def ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            timeouts = [t for t in (self.config.session_timeout, self.config.resume_grace_s) if t]
            if timeouts:
                self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    def _reap_interval(self) -> float:
        timeouts = [t for t in (self.config.session_timeout, self.config.resume_grace_s) if t]
        return max(0.05, min(5.0, min(timeouts) / 4))

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self._reap_interval())
            try:
                await self.reap_once()
            except Exception:
                logger.exception("Idle-session reaper failed; it keeps running")

    async def reap_once(self) -> int:
        now = time.monotonic()
        idle = self.config.session_timeout
        grace = self.config.resume_grace_s
        reaped = 0
        for session in list(self.sessions.values()):
            if session.busy:
                continue  # a running call ends by itself or at its deadline
            if session.detached_at is not None and now - session.detached_at > grace:
                await self.destroy(session, "resume grace period expired")
                reaped += 1
                if self.metrics is not None:
                    self.metrics.reaped("resume_grace")
            elif idle is not None and now - session.last_activity > idle:
                logger.info("Closing session %s after %.0fs idle", session_log_id(session.id), idle)
                await self.destroy(
                    session, f"session idle for more than {idle:g}s", CLOSE_IDLE_TIMEOUT
                )
                reaped += 1
                if self.metrics is not None:
                    self.metrics.reaped("idle")
        return reaped

    # -- running environment methods ---------------------------------------------------

    def _is_async(self, env: Environment, name: str) -> bool:
        key = (type(env), name)
        kind = self._method_kinds.get(key)
        if kind is None:
            kind = overrides(type(env), name)
            self._method_kinds[key] = kind
        return kind

    async def _run(self, session: Session, fn: Callable[[], Any]) -> Any:
        """Run a sync environment call off the event loop (or on it, if the env opted in)."""
        if session.env is not None and getattr(session.env, "RUNS_ON_EVENT_LOOP", False):
            return fn()
        fut = self.dispatcher.run(fn)
        session.pending = fut  # what a passed deadline gives up on
        try:
            return await fut
        finally:
            session.pending = None

    async def run_bounded(
        self,
        fn: Callable[[], T],
        timeout: float | None,
        what: str,
        then: Callable[[], Any] | None = None,
    ) -> T:
        """Run a sync call outside any session (factory, close) with a deadline; past it the
        thread is abandoned (running `then` if the call returns) and TIMEOUT is raised."""
        fut = self.dispatcher.run(fn)
        if timeout is None or fut.done():
            return await fut

        def expire() -> None:
            if not fut.done():
                self.dispatcher.abandon(fut, then)
                fut.set_exception(
                    CallTimeoutError(
                        f"{what}() of {self.factory_name} did not return within {timeout:g}s",
                        method=what,
                        timeout_s=timeout,
                    )
                )

        handle = asyncio.get_running_loop().call_later(timeout, expire)
        try:
            return await fut
        finally:
            handle.cancel()

    async def call(
        self,
        session: Session,
        work: Callable[[], Awaitable[T]],
        *,
        counts_as_step: bool = False,
        kind: str = "call",
        detached: bool = True,
    ) -> T:
        """Run one call of a session, in order with its other calls, within its deadline.

        `counts_as_step`: the call is an agent's action (a step, a tool call); the session's
        step count, reported on resume, counts those that completed. `kind` (reset, step,
        state, call) picks the deadline. `detached`: `work` awaits async environment code,
        so it runs in a task of its own that the deadline can leave behind even if that code
        ignores cancellation (False: it only awaits sync calls on the dispatcher, the fast path).
        """
        session.busy += 1
        lock = session.lock
        try:
            # acquire/release rather than `async with`: two coroutine calls less per call.
            await lock.acquire()
            try:
                if session.closed or session.env is None:
                    raise self._closed_error(session)
                if self.draining:
                    raise SessionExpiredError(
                        "Server is shutting down; start a new session on another server.",
                        reason="shutdown",
                    )
                session.touch()
                if counts_as_step and kind == "call":
                    kind = "step"  # an MCP tool call is an agent's action: the step deadline
                timeout = self._timeouts.get(kind, self._timeouts["call"])
                session.call_task = asyncio.current_task()
                if timeout is not None:
                    session.deadline = (session.last_activity + timeout, kind, timeout)
                    if self._watchdog is None:
                        self._start_watchdog()
                self.running.add(session)
                try:
                    result = await (self._detached(session, work) if detached else work())
                except (CallTimeoutError, asyncio.CancelledError) as exc:
                    timed_out = session.call_timed_out
                    if timed_out is None:
                        raise
                    if isinstance(exc, asyncio.CancelledError) and not detached:
                        _uncancel(asyncio.current_task())  # our own cancel(), now a TIMEOUT
                    await self._end_hung(session, timed_out)
                    raise timed_out from None
                finally:
                    self.running.discard(session)
                    session.call_task = session.waiter = session.deadline = None
                    if self._all_done is not None and not self.running:
                        self._all_done.set()
                if session.call_timed_out is not None:
                    # The deadline passed just as the call returned: keep its result.
                    if not detached:
                        _uncancel(asyncio.current_task())
                    session.call_timed_out = None
                if counts_as_step:
                    session.step_count += 1
                return result
            finally:
                lock.release()
        finally:
            session.busy -= 1
            session.touch()

    def _expire(self, session: Session, kind: str, timeout: float, why: str | None) -> None:
        """A call's deadline passed (or the server shuts down): give it up now."""
        task = session.call_task
        if task is None or session.call_timed_out is not None:
            return
        message = why or f"{kind}() did not return within its {timeout:g}s deadline"
        if session.id != "stateless":
            message += "; the session was ended (start a new one)"
        error = CallTimeoutError(message, method=kind, timeout_s=timeout)
        session.call_timed_out = error
        fut = session.pending
        if fut is not None and not fut.done():
            env = session.env
            # The abandoned thread closes the environment once (if ever) the call returns; a
            # close now would race the call still running in it.
            if self.dispatcher.abandon(fut, env.close if env is not None else None):
                session.env = None
            fut.set_exception(error)
            return
        task.cancel()  # async code is cancelled at its await
        waiter = session.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)  # ... and left behind, should it not stop

    async def _detached(self, session: Session, work: Callable[[], Awaitable[T]]) -> T:
        """Run `work` in a task of its own; the caller stops waiting at the deadline."""
        loop = asyncio.get_running_loop()
        inner: asyncio.Task[T] = loop.create_task(work())  # type: ignore[arg-type]
        waiter: asyncio.Future[None] = loop.create_future()
        inner.add_done_callback(functools.partial(_wake, waiter))
        session.call_task, session.waiter = inner, waiter
        try:
            await waiter
        except asyncio.CancelledError:
            inner.cancel()  # the caller went away (its connection ended)
            raise
        if not inner.done():
            assert session.call_timed_out is not None
            raise session.call_timed_out
        return inner.result()

    def _start_watchdog(self) -> None:
        timeouts = [t for t in self._timeouts.values() if t is not None]
        tick = max(0.02, min(1.0, min(timeouts) / 10)) if timeouts else 1.0
        self._watchdog = asyncio.get_running_loop().create_task(self._watch(tick))

    async def _watch(self, tick: float) -> None:
        """Expire calls past their deadline (one task for all calls: no timer per call)."""
        while True:
            await asyncio.sleep(tick)
            if not self.running:
                continue
            now = time.monotonic()
            for session in list(self.running):
                deadline = session.deadline
                if deadline is not None and now >= deadline[0]:
                    try:
                        self._expire(session, deadline[1], deadline[2], None)
                    except Exception:
                        logger.exception("Ending a call past its deadline failed")

    def _expire_all(self, why: str) -> None:
        for session in list(self.running):
            self._expire(session, "call", 0, why)

    async def _end_hung(self, session: Session, error: CallTimeoutError) -> None:
        """End a session whose call passed its deadline: its slot is freed at once."""
        logger.warning("Session %s ended: %s", session_log_id(session.id), error.message)
        if session._closed:
            return
        session._closed = True
        session.closed_reason = error.message
        if self.sessions.pop(session.id, None) is not None:
            if self.metrics is not None:
                self.metrics.session_closed(session)
                self.metrics.reaped("call_timeout")
            self._ended[session.id] = (session.transport, error.message)
            while len(self._ended) > _ENDED_REMEMBERED:
                self._ended.popitem(last=False)
            self.slots.release()
        # The socket stays open: later requests on it are told why the session ended.
        await self._close_env(session)

    @staticmethod
    def _ended_error(session_id: str, reason: str) -> SessionExpiredError:
        return SessionExpiredError(
            f"Session {session_id} was ended by the server because a call hung: {reason}. "
            "Start a new session.",
            reason="call_timeout",
        )

    def _closed_error(self, session: Session) -> ServerError:
        if session.call_timed_out is not None:
            return self._ended_error(session.id, session.closed_reason or "")
        return SessionLostError(
            f"Session {session.id} is closed ({session.closed_reason or 'closed'})."
        )

    async def once(
        self,
        session: Session,
        request_id: RequestId,
        work: Callable[[], Awaitable[EncodedReply]],
    ) -> EncodedReply:
        """Run `work` (which returns the encoded reply) at most once per request id of
        `session`, on any transport.

        A request re-sent after a dropped connection gets the stored outcome (its reply or its
        error) or waits for the one still running, so no step is lost or applied twice. The
        last `replay_window` ids are remembered, with as many of the newest replies as fit in
        `replay_bytes` (the newest always); one whose reply was dropped gets REPLY_EVICTED.
        """
        replies, inflight = session.replies, session.inflight
        if replies is None or inflight is None:
            replies, inflight = session.replies, session.inflight = OrderedDict(), {}
        if request_id in replies:
            stored = replies[request_id]
            if stored is None:
                raise ReplyEvictedError(
                    f"Request {request_id!r} was applied, but its reply is no longer kept "
                    f"(at most {self.config.replay_bytes} bytes of replies per session); it is "
                    "not applied again and its outcome is unknown",
                    request_id=request_id,
                )
        else:
            pending = inflight.get(request_id)
            if pending is not None:
                stored = await asyncio.shield(pending)
            else:
                fut: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
                inflight[request_id] = fut
                try:
                    stored = await work()
                except Exception as exc:
                    outcome = _replayable(exc)
                    inflight.pop(request_id, None)
                    self._store_reply(session, request_id, outcome)
                    if not fut.done():
                        fut.set_result(outcome)
                    raise  # the caller that ran it sees the original error and its traceback
                except BaseException:
                    inflight.pop(request_id, None)
                    fut.cancel()  # a waiting duplicate re-raises CancelledError and gives up
                    raise
                inflight.pop(request_id, None)
                self._store_reply(session, request_id, stored)
                if not fut.done():
                    fut.set_result(stored)
        if isinstance(stored, ServerError):
            raise _replayable(stored)  # a fresh copy: raising the stored one would grow it
        return stored

    def _store_reply(self, session: Session, request_id: RequestId, outcome: Outcome) -> None:
        """Keep `outcome`; drop the oldest replies past `replay_bytes` (their ids stay, so a
        re-send is refused rather than applied again) and the oldest ids past
        `replay_window`."""
        replies = session.replies
        assert replies is not None
        replies[request_id] = outcome
        size_before = session.replay_size
        session.replay_size += _outcome_size(outcome)
        limit = self.config.replay_bytes
        if session.replay_size > limit:
            for rid, old in replies.items():
                if session.replay_size <= limit or rid == request_id:
                    break
                if old is not None:
                    session.replay_size -= _outcome_size(old)
                    replies[rid] = None
        while len(replies) > self.config.replay_window:
            _, old = replies.popitem(last=False)
            if old is not None:
                session.replay_size -= _outcome_size(old)
        if self.metrics is not None and session.replay_size != size_before and not session.closed:
            self.metrics.replay_bytes.inc(session.replay_size - size_before)

    async def reset(self, session: Session, kwargs: dict[str, Any]) -> Observation:
        metrics = self.metrics

        async def work() -> Observation:
            env = session.env
            assert env is not None
            started = perf_counter() if metrics is not None else 0.0
            try:
                if self._is_async(env, "reset_async"):
                    obs = await env.reset_async(**filter_kwargs(env.reset_async, kwargs))
                else:
                    kw = filter_kwargs(env.reset, kwargs)
                    obs = await self._run(session, functools.partial(env.reset, **kw))
            except Exception as exc:
                raise self._execution_error("reset", exc) from exc
            await reset_rubric(env)
            if metrics is not None:
                session.env_seconds = perf_counter() - started
            return self._check_observation(obs, "reset")

        env = session.env
        sync = (
            env is not None
            and not self._is_async(env, "reset_async")
            and getattr(env, "rubric", None) is None
        )
        call = self.call(session, work, kind="reset", detached=not sync)
        if metrics is None and self.tracer is None:
            return await call
        return await self._observed("reset", session, call)

    async def step(
        self, session: Session, action: Action, kwargs: dict[str, Any] | None = None
    ) -> Observation:
        metrics = self.metrics

        async def work() -> Observation:
            env = session.env
            assert env is not None
            started = perf_counter() if metrics is not None else 0.0
            try:
                if self._is_async(env, "step_async"):
                    fn = env.step_async
                    obs = await (fn(action, **filter_kwargs(fn, kwargs)) if kwargs else fn(action))
                else:
                    kw = filter_kwargs(env.step, kwargs) if kwargs else {}
                    obs = await self._run(session, functools.partial(env.step, action, **kw))
            except Exception as exc:
                raise self._execution_error("step", exc) from exc
            obs = self._check_observation(obs, "step")
            if getattr(env, "rubric", None) is not None:
                await score_step(env, action, obs, lambda fn: self._run(session, fn))
            if metrics is not None:
                session.env_seconds = perf_counter() - started
            return obs

        env = session.env
        sync = (
            env is not None
            and not self._is_async(env, "step_async")
            and getattr(env, "rubric", None) is None
        )
        call = self.call(session, work, counts_as_step=True, kind="step", detached=not sync)
        if self.tracer is not None:
            return await self._observed("step", session, call)
        if metrics is None:
            return await call
        try:  # `_observed` without a span, inline: this runs for every step
            obs = await call
        except BaseException:
            metrics.failed("step")
            raise
        metrics.answered("step", obs.done, session.env_seconds)
        return obs

    async def _observed(
        self, kind: str, session: Session, call: Awaitable[Observation]
    ) -> Observation:
        """Await a reset/step, counting its outcome and time in the environment (metrics) and
        inside a span (tracing)."""
        metrics, tracer = self.metrics, self.tracer
        try:
            if tracer is None:
                obs = await call
            else:
                with tracer.span(kind, session):
                    obs = await call
        except BaseException:
            if metrics is not None:
                metrics.failed(kind)
            raise
        if metrics is not None:
            metrics.answered(kind, obs.done, session.env_seconds)
        return obs

    async def state(self, session: Session) -> State:
        async def work() -> State:
            env = session.env
            assert env is not None
            try:
                return await self._run(session, lambda: env.state)
            except Exception as exc:
                raise self._execution_error("state", exc) from exc

        return await self.call(session, work, kind="state", detached=False)

    @staticmethod
    def _check_observation(obs: Any, method: str) -> Observation:
        if not isinstance(obs, Observation):
            raise EnvironmentExecutionError(
                f"{method}() returned {type(obs).__name__}, expected an Observation",
                method=method,
            )
        return obs

    @staticmethod
    def _execution_error(method: str, exc: Exception) -> ServerError:
        if isinstance(exc, ServerError):
            return exc  # the environment chose its error (e.g. InvalidActionError)
        logger.warning("Environment %s() raised %s", method, exception_message(exc))
        extra: dict[str, Any] = {}
        if _declares_infrastructure(exc):
            # e.g. a harness that would not start: the client may retry, never score it
            extra["category"] = "infrastructure"
        return EnvironmentExecutionError(
            str(exc) or type(exc).__name__, method=method, exception=type(exc).__name__, **extra
        )

    # -- stateless calls (OpenEnv's HTTP behaviour) ------------------------------------

    async def with_throwaway_env(self, work: Callable[[Session], Awaitable[Any]]) -> Any:
        """Run `work` on a fresh environment that is closed afterwards.

        The environment holds a slot of the same pool as sessions while it lives (waiting in
        the queue like a new session, CAPACITY_REACHED when that is full): stateless calls never
        make more live instances than `max_concurrent_envs`.
        """
        await self._acquire_slot(self.config.queue_timeout_s)
        session = Session("stateless", "http")
        try:
            session.env = await self.build_env()
            await self._enter_session_context(session)
            return await work(session)
        finally:
            session._closed = True
            try:
                await self._close_env(session)
            finally:
                self.slots.release()


def _wake(waiter: asyncio.Future[None], task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, also for a task left behind by its deadline
    if not waiter.done():
        waiter.set_result(None)


def _uncancel(task: asyncio.Task[Any] | None) -> None:
    """Undo our own `cancel()` of a task whose cancellation became a TIMEOUT (Python 3.11+)."""
    uncancel = getattr(task, "uncancel", None)
    cancelling = getattr(task, "cancelling", None)
    if uncancel is not None and cancelling is not None and cancelling():
        uncancel()


def _is_mcp_environment(env: object) -> TypeGuard[MCPEnvironment]:
    """Whether `env` is an `MCPEnvironment`, without importing fastmcp for servers of plain
    environments: if its module was never imported, no instance of it can exist."""
    module = sys.modules.get(f"{__package__}.mcp_environment")
    return module is not None and isinstance(env, module.MCPEnvironment)
