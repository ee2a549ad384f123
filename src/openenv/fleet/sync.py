"""The blocking twins of `EnvFleet` and `VectorEnv`, for sync trainers.

The fleet, its health checks and every session's connection live on one private loop thread;
sync code calls into it and waits. Sessions come back as `SyncEnvClient`s running on that same
loop, so a session acquired here behaves like `EchoEnv(...).sync()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from openenv.core.sync_client import SyncEnvClient, start_loop_thread

if TYPE_CHECKING:
    from openenv.providers import StartedEnv

    from .fleet import EnvFleet, FleetStats
    from .vector import BatchResult, VectorEnv

T = TypeVar("T")


class SyncEnvFleet:
    """`with EnvFleet("echo", servers=2).sync() as fleet: env = fleet.acquire()`."""

    def __init__(self, fleet: EnvFleet) -> None:
        self.fleet = fleet
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._loop is None:
                self._loop, self._thread = start_loop_thread("openenv-fleet-loop")
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def start(self) -> SyncEnvFleet:
        self._run(self.fleet.start())
        return self

    def acquire(self, timeout_s: Optional[float] = None) -> SyncEnvClient[Any, Any, Any]:
        client = self._run(self.fleet.acquire(timeout_s))
        assert self._loop is not None
        return SyncEnvClient(client, loop=self._loop)

    def release(self, session: SyncEnvClient[Any, Any, Any]) -> None:
        self._run(self.fleet.release(session.async_client))

    @contextlib.contextmanager
    def session(self, timeout_s: Optional[float] = None) -> Iterator[SyncEnvClient[Any, Any, Any]]:
        env = self.acquire(timeout_s)
        try:
            yield env
        finally:
            self.release(env)

    def vector(
        self, num_envs: int, *, autoreset: bool = False, timeout_s: Optional[float] = None
    ) -> SyncVectorEnv:
        return SyncVectorEnv(
            self, self._run(self.fleet.vector(num_envs, autoreset=autoreset, timeout_s=timeout_s))
        )

    def session_error(
        self, session: SyncEnvClient[Any, Any, Any], exc: BaseException
    ) -> BaseException:
        """`EnvFleet.session_error` for a session acquired here."""
        return self._run(self.fleet.session_error(session.async_client, exc))

    def stats(self) -> FleetStats:
        return self.fleet.stats()

    def servers(self) -> list[StartedEnv]:
        return self.fleet.servers()

    def close(self) -> None:
        """Close the fleet (every session, every server), then stop the loop thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            from openenv.core.utils import run_coroutine_sync

            run_coroutine_sync(self.fleet.close())
            return
        try:
            asyncio.run_coroutine_threadsafe(self.fleet.close(), loop).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(5.0)
            loop.close()

    def __enter__(self) -> SyncEnvFleet:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SyncVectorEnv:
    """The blocking twin of `VectorEnv`."""

    def __init__(self, fleet: SyncEnvFleet, vector: VectorEnv) -> None:
        self._fleet = fleet
        self.vector = vector

    @property
    def num_envs(self) -> int:
        return self.vector.num_envs

    @property
    def autoreset(self) -> bool:
        return self.vector.autoreset

    def reset(
        self,
        *,
        indices: Optional[Sequence[int]] = None,
        seed: int | Sequence[Optional[int]] | None = None,
        **kwargs: Any,
    ) -> BatchResult:
        return self._fleet._run(self.vector.reset(indices=indices, seed=seed, **kwargs))

    def step(
        self, actions: Sequence[Any], *, indices: Optional[Sequence[int]] = None, **kwargs: Any
    ) -> BatchResult:
        return self._fleet._run(self.vector.step(actions, indices=indices, **kwargs))

    def close(self) -> None:
        self._fleet._run(self.vector.close())

    def __enter__(self) -> SyncVectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
