"""`SyncEnvClient`: a blocking facade over an async client, for scripts and sync trainers."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .client_types import StepResult

if TYPE_CHECKING:
    from .env_client import EnvClient

T = TypeVar("T")
ActT = TypeVar("ActT")
ObsT = TypeVar("ObsT")
StateT = TypeVar("StateT")


def start_loop_thread(name: str) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """A new event loop running forever on a daemon thread, for blocking facades."""
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        loop.run_forever()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    if not started.wait(5.0):
        raise RuntimeError(f"The event loop thread {name} did not start")
    return loop, thread


class SyncEnvClient(Generic[ActT, ObsT, StateT]):
    """Runs the wrapped client on a private event loop thread.

    Every coroutine method of the client is available as a blocking method with its exact
    return type (`reset`, `step`, `state`, and e.g. `list_tools` / `call_tool` on MCP clients).
    The client used from sync code without this wrapper runs on the same thread.
    """

    def __init__(
        self,
        async_client: EnvClient[ActT, ObsT, StateT],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """`loop`: run on this running loop (e.g. a fleet's, which owns the connection) instead
        of a private one; it is not stopped on close."""
        self._client = async_client
        self._loop: asyncio.AbstractEventLoop | None = loop
        self._thread: threading.Thread | None = None
        self._owns_loop = loop is None
        self._lock = threading.Lock()

    @property
    def async_client(self) -> EnvClient[ActT, ObsT, StateT]:
        return self._client

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or not self._loop.is_running():
                if not self._owns_loop:
                    raise RuntimeError("The event loop this sync client runs on has stopped")
                self._loop, self._thread = start_loop_thread("openenv-sync-client-loop")
            return self._loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            self._client._claim_mode("sync")
        except BaseException:
            coro.close()
            raise
        loop = self._ensure_loop()
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def _stop_loop(self) -> None:
        if not self._owns_loop:
            return
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(5.0)
        loop.close()

    def connect(self) -> SyncEnvClient[ActT, ObsT, StateT]:
        self._run(self._client._connect_async())
        return self

    def disconnect(self) -> None:
        self._run(self._client._disconnect_async())

    def reset(self, **kwargs: Any) -> StepResult[ObsT]:
        return self._run(self._client._reset_async(**kwargs))

    def step(self, action: ActT, **kwargs: Any) -> StepResult[ObsT]:
        return self._run(self._client._step_async(action, **kwargs))

    def state(self) -> StateT:
        return self._run(self._client._state_async())

    def close(self) -> None:
        """Close the client, then stop the loop thread."""
        loop = self._loop
        if loop is None or not loop.is_running():
            # Never used, but it may own a started environment: stop that all the same.
            from .utils import run_coroutine_sync

            self._client._claim_mode("sync")
            run_coroutine_sync(self._client._close_async())
            return
        try:
            self._run(self._client._close_async())
        finally:
            self._stop_loop()

    def __enter__(self) -> SyncEnvClient[ActT, ObsT, StateT]:
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if asyncio.iscoroutinefunction(attr):

            @functools.wraps(attr)
            def blocking(*args: Any, **kwargs: Any) -> Any:
                return self._run(attr(*args, **kwargs))

            return blocking
        return attr
