"""Who started a client's environment, as the client sees it: the `EnvironmentOwner` contract.

A client built by `from_env` / `from_docker_image` (or handed out by a fleet) drives an
environment that something else started: a provider, a fleet, a user's own launcher. The client
is given that owner (`EnvClient(owner=...)` or `client.attach_owner(owner)`) and asks it three
things only: is the environment still running (to tell a dead environment from a network blip),
what did it print last (for the error that says it died) and, when the client closes, to stop
it. Providers and fleets implement the contract; the client knows none of them.

`PendingClient` is what the factories return: a client whose environment starts when it is
awaited, entered or made sync.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Optional, Protocol, TypeVar, runtime_checkable

C = TypeVar("C")


@runtime_checkable
class EnvironmentOwner(Protocol):
    """What started a client's environment and will stop it."""

    @property
    def label(self) -> str:
        """The environment in messages, e.g. "environment local-echo-1a2b3c4d ('echo')"."""
        ...

    async def is_running(self) -> bool:
        """False once the environment is gone (crashed, killed, out of its limits)."""
        ...

    async def log_tail(self, lines: int = 40) -> str:
        """The last lines the environment printed ("" when unknown)."""
        ...

    async def stop(self) -> None:
        """Stop the environment (the client is done with it); safe to call twice."""
        ...


class OpenEnvProviderOwner:
    """The owner behind OpenEnv's `EnvClient(base_url, provider=...)`: one environment per
    provider, stopped with its `stop_container()` (or `stop()`). Such a provider cannot say
    whether its environment still runs, so it is taken to run."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider

    @property
    def label(self) -> str:
        return f"the environment of {type(self.provider).__name__}"

    async def is_running(self) -> bool:
        return True

    async def log_tail(self, lines: int = 40) -> str:
        return ""

    async def stop(self) -> None:
        stop = getattr(self.provider, "stop_container", None) or getattr(
            self.provider, "stop", None
        )
        if stop is not None:
            result = stop()
            if asyncio.iscoroutine(result):
                await result


class PendingClient(Coroutine[Any, Any, C]):
    """A client whose environment starts when it is awaited, entered or made sync.

    It is also a coroutine, as OpenEnv's factory handle is: `asyncio.run(Env.from_env(...))`
    gives a connected client, which sync code may go on using (it moves to its own loop).
    """

    def __init__(self, create: Callable[[], Coroutine[Any, Any, C]]) -> None:
        self._create = create
        self._client: Optional[C] = None
        self._driven: Optional[Coroutine[Any, Any, C]] = None

    def __await__(self) -> Generator[Any, None, C]:
        return self._connected().__await__()

    def _coroutine(self) -> Coroutine[Any, Any, C]:
        if self._driven is None:
            self._driven = self._connected()
        return self._driven

    def send(self, value: Any) -> Any:
        return self._coroutine().send(value)

    def throw(self, *args: Any) -> Any:
        return self._coroutine().throw(*args)

    def close(self) -> None:
        if self._driven is not None:
            self._driven.close()

    async def _connected(self) -> C:
        client = await self._create()
        try:
            await client.connect()  # type: ignore[attr-defined]
        except BaseException:
            with contextlib.suppress(Exception):
                await client.close()  # type: ignore[attr-defined]
            raise
        return client

    async def __aenter__(self) -> C:
        self._client = await self._connected()
        return self._client

    async def __aexit__(self, *exc: Any) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()  # type: ignore[attr-defined]

    def sync(self) -> Any:
        """A blocking client (`SyncEnvClient`); use it in a `with` block or call `close()`."""
        from .utils import run_coroutine_sync

        client = run_coroutine_sync(self._create())
        return client.sync()  # type: ignore[attr-defined]


async def start_owned(
    client_cls: type[C],
    target: str,
    provider: Any,
    default_provider: str,
    kwargs: dict[str, Any],
) -> C:
    """Start `target` and build an unconnected `client_cls` attached to its owner.

    Starting environments is the providers' job: this is the one place core hands over to
    them, imported when an environment is first started (core imports no provider on import).
    """
    from openenv.providers.launch import start_owned_client

    return await start_owned_client(client_cls, target, provider, default_provider, kwargs)
