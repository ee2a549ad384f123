"""Session lifecycle: slots, a bounded wait queue and ordered env calls.

One `SessionManager` per server. A session owns one environment instance. Its calls run one
at a time (an asyncio lock, no thread per session); sync environment methods run on a shared
thread pool so they never block the event loop, async ones run on the loop itself.

The manager composes three parts with modules of their own:
- `CallWatchdog` (call_watchdog.py): every environment call has a server-side deadline
  (`ServerConfig.timeout_for`). A call past it gets a TIMEOUT error and its session ends at once
  (slot freed, later calls told why): a sync call's thread is abandoned to the dispatcher (it
  closes the environment if the call ever returns), an async call is cancelled.
- `IdleReaper` (reaper.py): ends idle sessions, and resumable ones whose connection stayed away.
- `ReplayStore` (replay_store.py): per session, the outcomes of requests by id, which the
  transports consult so that a re-sent request is answered, not applied again
  (`SessionManager.replay_store`).

On SIGTERM, `drain` refuses new work, waits up to the grace period for calls in flight, ends the
rest the same way, and closes every session.
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
from collections import deque
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

from ..errors import (
    CallTimeoutError,
    CapacityReachedError,
    EnvironmentExecutionError,
    FactoryError,
    OpenEnvError,
    ServerError,
    SessionExpiredError,
    SessionLostError,
    exception_message,
)
from ..protocol import CLOSE_IDLE_TIMEOUT as CLOSE_IDLE_TIMEOUT  # re-exported (protocol's)
from ..protocol import CLOSE_NORMAL, CLOSE_RESTART, CLOSE_SHUTDOWN, session_log_id
from ..protocol import CLOSE_TAKEN_OVER as CLOSE_TAKEN_OVER  # re-exported (defined in protocol)
from .call_watchdog import CALL_KINDS, CallWatchdog, uncancel
from .config import DEFAULT_CONCURRENT_SESSIONS, ServerConfig
from .connections import close_websocket_soon, wait_closing
from .dispatch import CallDispatcher
from .errors import ConcurrencyConfigurationError
from .interfaces import Environment, overrides, session_context_of
from .metrics import ServerMetrics, make_tracer
from .reaper import IdleReaper
from .replay_store import Outcome as Outcome  # re-exported (defined in replay_store)
from .replay_store import ReplayStore
from .rewards import reset_rubric, score_step
from .session_gc import SessionHeapFreezer, sized_young_generation
from .types import Action, Observation, ServerCapacityStatus, SessionInfo, State
from .workers import worker_prefix

if TYPE_CHECKING:
    from .mcp_environment import MCPEnvironment

logger = logging.getLogger("openenv.server")

T = TypeVar("T")

# The WebSocket close codes a server ends a session with (CLOSE_*) are protocol.py's; they stay
# importable from here.
#: The close reason that goes with `CLOSE_RESTART` (server shutting down).
RESTART_REASON = "server shutting down; start a new session (on another server)"


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
        "last_activity",
        "pending",
        "replay",
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
        #: Outcomes of requests by id, made on the first request with one
        #: (`SessionManager.replay_store`).
        self.replay: ReplayStore | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def replay_size(self) -> int:
        """Bytes of replies kept for re-sent requests."""
        return self.replay.size if self.replay is not None else 0

    def mark_closed(self, reason: str) -> None:
        """The session ends now (its resources are released by the caller); what it keeps for
        re-sent requests no longer counts in the metrics."""
        self._closed = True
        self.closed_reason = reason
        if self.replay is not None:
            self.replay.gauge = None

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
        self.draining = False
        timeouts = {k: config.timeout_for(k) for k in CALL_KINDS}
        self._close_timeout: float | None = timeouts["call"]
        single = getattr(self.env_class, "REQUIRES_SINGLE_THREAD_EXECUTOR", False)
        # Threads start on demand: the pool only grows to as many sync calls as block at once.
        workers = 1 if single else config.max_threads
        idle = config.thread_idle_s
        self.dispatcher = CallDispatcher(workers, idle_timeout=idle if idle > 0 else None)
        #: Deadlines of the calls running, and the sessions a hung call ended.
        self.watchdog = CallWatchdog(timeouts, self.dispatcher)
        #: Sessions with a call running (HTTP stateless ones included), for shutdown.
        self.running = self.watchdog.running
        self._id_prefix = worker_prefix()
        self._method_kinds: dict[tuple[type, str], bool] = {}
        #: Server mode given to MCP environments so mode-specific tools match the server.
        self.env_mode: str | None = None
        #: Prometheus metrics and OpenTelemetry spans; None (nothing imported) when off.
        self.metrics: ServerMetrics | None = ServerMetrics() if config.metrics else None
        self.tracer = make_tracer(config.tracing)
        if self.metrics is not None:
            self.slots.queued_gauge = self.metrics.sessions_queued
        #: Ends idle sessions, and resumable ones whose connection stayed away.
        self.reaper = IdleReaper(config, self.sessions, self.destroy, self.metrics)

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
            timeout = self.watchdog.timeouts["call"]
            env = await self.run_bounded(build, timeout, "factory", close_late)
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
        if session is None:
            ended = self.watchdog.ended_error(session_id, by)
            if ended is not None:
                raise ended
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
        session.mark_closed(reason)
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
            if session.replay is not None:
                session.replay.cancel_waiters()
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
        await self.reaper.stop()
        await self.watchdog.stop()
        self.draining = True
        self.watchdog.expire_all("the server shut down before the call finished")
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
        await self.watchdog.settle(grace)
        # Calls still running are given up; a close() gets what is left of the grace period.
        self._close_timeout = max(0.5, deadline - loop.time())
        if self.running:
            why = f"the server shut down; the call did not finish within {grace:g}s"
            self.watchdog.expire_all(why)
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

    # -- the idle reaper (reaper.py) and re-sent requests (replay_store.py) -----------------

    def ensure_reaper(self) -> None:
        self.reaper.ensure_running()

    async def reap_once(self) -> int:
        return await self.reaper.reap_once()

    def replay_store(self, session: Session) -> ReplayStore:
        """The outcomes of `session`'s requests by id, which a transport consults before it
        runs a request with an id (see replay_store.py), made on first use."""
        replay = session.replay
        if replay is None:
            metrics = self.metrics
            replay = session.replay = ReplayStore(
                self.config.replay_window,
                self.config.replay_bytes,
                metrics.replay_bytes if metrics is not None and not session.closed else None,
            )
        return replay

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
                    raise CallWatchdog.closed_error(session)
                if self.draining:
                    raise SessionExpiredError(
                        "Server is shutting down; start a new session on another server.",
                        reason="shutdown",
                    )
                session.touch()
                if counts_as_step and kind == "call":
                    kind = "step"  # an MCP tool call is an agent's action: the step deadline
                watchdog = self.watchdog
                watchdog.begin(session, kind)
                try:
                    result = await (watchdog.detached(session, work) if detached else work())
                except (CallTimeoutError, asyncio.CancelledError) as exc:
                    timed_out = session.call_timed_out
                    if timed_out is None:
                        raise
                    if isinstance(exc, asyncio.CancelledError) and not detached:
                        uncancel(asyncio.current_task())  # our own cancel(), now a TIMEOUT
                    await self._end_hung(session, timed_out)
                    raise timed_out from None
                finally:
                    watchdog.end(session)
                if session.call_timed_out is not None:
                    # The deadline passed just as the call returned: keep its result.
                    if not detached:
                        uncancel(asyncio.current_task())
                    session.call_timed_out = None
                if counts_as_step:
                    session.step_count += 1
                return result
            finally:
                lock.release()
        finally:
            session.busy -= 1
            session.touch()

    async def _end_hung(self, session: Session, error: CallTimeoutError) -> None:
        """End a session whose call passed its deadline: its slot is freed at once."""
        logger.warning("Session %s ended: %s", session_log_id(session.id), error.message)
        if session._closed:
            return
        session.mark_closed(error.message)
        if self.sessions.pop(session.id, None) is not None:
            if self.metrics is not None:
                self.metrics.session_closed(session)
                self.metrics.reaped("call_timeout")
            self.watchdog.remember_ended(session, error.message)
            self.slots.release()
        # The socket stays open: later requests on it are told why the session ended.
        await self._close_env(session)

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


def _is_mcp_environment(env: object) -> TypeGuard[MCPEnvironment]:
    """Whether `env` is an `MCPEnvironment`, without importing fastmcp for servers of plain
    environments: if its module was never imported, no instance of it can exist."""
    module = sys.modules.get(f"{__package__}.mcp_environment")
    return module is not None and isinstance(env, module.MCPEnvironment)
