"""How one client method serves both sync and async callers (OpenEnv 0.10's dual-mode client).

`EnvClient.reset()` (and `step`, `state`, `connect`, `disconnect`, `close`) returns an awaitable
in async code and the result itself in sync code, so OpenEnv code such as
`with ChessEnv(base_url=url) as env: env.reset()` runs unchanged. A client serves one kind of
caller: the first use fixes its mode, and a use of the other kind raises `RuntimeError`.

Inside a running event loop before the mode is fixed, a call cannot know whether it will be
awaited, so it returns a `DeferredResult`: awaiting it fixes async mode; reading an attribute
(or its truth value) fixes sync mode and runs the call on the client's private loop thread, as
a notebook cell that never awaits expects.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

if TYPE_CHECKING:
    from .env_client import EnvClient

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

ExecutionMode = Literal["sync", "async"]


class MaybeAwaitable(Protocol[T_co]):
    """The static type of a dual-mode call.

    `await` gives `T` (async code); in sync code the call gives `T` itself, which a type checker
    sees only through attribute access (typed `Any`). For exact static types in sync code use
    the `.sync()` wrapper, whose methods return `T`.
    """

    def __await__(self) -> Generator[Any, None, T_co]: ...

    def __getattr__(self, name: str) -> Any: ...


class MixedModesError(RuntimeError):
    """A client used from sync code was used from async code, or the other way round."""


class DeferredResult(Generic[T]):
    """A call made in a running loop by a client whose mode is not fixed yet.

    Nothing runs until it is awaited (async mode) or read (sync mode); it runs at most once.
    """

    def __init__(
        self,
        client: EnvClient[Any, Any, Any],
        start: Callable[[], Coroutine[Any, Any, T]],
        *,
        last: bool = False,
    ) -> None:
        self._client = client
        self._start = start
        self._last = last  # `close()`: stop the private loop thread after it
        self._done = False
        self._value: Any = None

    def __await__(self) -> Generator[Any, None, T]:
        self._client._claim_mode("async")
        return self._start().__await__()

    def _resolve(self) -> T:
        if not self._done:
            self._value = self._client._run_blocking(self._start, last=self._last)
            self._done = True
        return self._value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)  # introspection (copy, pickle, ...) must not run the call
        return getattr(self._resolve(), name)

    def __bool__(self) -> bool:
        return bool(self._resolve())

    def __eq__(self, other: object) -> bool:
        return bool(self._resolve() == other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self._done:
            return repr(self._value)
        return f"<{type(self).__name__}: await it (async code) or read it (sync code)>"
