"""The `Environment` base class that every served environment implements."""

from __future__ import annotations

import inspect
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, Protocol, TypedDict, TypeVar

from .types import Action, EnvironmentMetadata, Observation, State

ActT = TypeVar("ActT", bound=Action)
ObsT = TypeVar("ObsT", bound=Observation)
StateT = TypeVar("StateT", bound=State)


class Message(TypedDict):
    """A chat message compatible with Hugging Face chat templates."""

    role: str
    content: str


class ModelTokenizer(Protocol):
    def apply_chat_template(
        self,
        conversation: list[Message],
        tokenize: bool = True,
        return_tensors: str | None = None,
        **kwargs: Any,
    ) -> Any: ...

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str: ...


class Transform(ABC, Generic[ObsT]):
    """Maps an observation to another one (TorchRL style), e.g. to add a shaped reward."""

    @abstractmethod
    def __call__(self, observation: ObsT) -> ObsT: ...


class Environment(ABC, Generic[ActT, ObsT, StateT]):
    """An environment served to trainers and agents.

    Implement `reset`, `step` and the `state` property (sync), or override `reset_async` /
    `step_async` for environments that are naturally async. The server runs sync methods on a
    worker thread so they never block other sessions, and calls the async ones on its loop.
    """

    #: Set True when several instances may live in one process at once.
    SUPPORTS_CONCURRENT_SESSIONS: bool = False
    #: Set True for thread-affine libraries: all sync calls of all sessions then share one thread.
    REQUIRES_SINGLE_THREAD_EXECUTOR: bool = False
    #: Set True only when reset/step/state are quick CPU work (well under a millisecond) that
    #: never waits on I/O: the server then calls them on its event loop instead of handing each
    #: call to a worker thread. For a trivial step that saves a little latency and, in
    #: process, about a sixth of the CPU per step (not end to end at 64 sessions:
    #: `bench/README.md`). A slow method with this flag stalls every session of the process
    #: and cannot be given up at its deadline, so the default is False (docs/scaling.md says
    #: what it gives up).
    RUNS_ON_EVENT_LOOP: bool = False

    transform: Transform[ObsT] | None = None
    rubric: Any = None
    #: OpenEnv's hook: a factory of an async context the server holds open for the session's
    #: life (e.g. an MCP client transport), entered after creation and left before `close()`.
    #: A `session_context()` method, if defined, is held instead (`session_context_of`).
    mcp_session: Callable[[], AbstractAsyncContextManager[Any]] | None = None
    #: Set by `_apply_rubric*`: this step scored itself, so the server does not score it again.
    _rubric_scored: bool = False

    def __init__(self, transform: Transform[ObsT] | None = None, rubric: Any = None) -> None:
        self.transform = transform
        self.rubric = rubric

    @abstractmethod
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ObsT:
        """Start a new episode; the same seed must give the same episode."""

    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> ObsT:
        return self.reset(seed=seed, episode_id=episode_id, **kwargs)

    @abstractmethod
    def step(self, action: ActT, timeout_s: float | None = None, **kwargs: Any) -> ObsT:
        """Apply one action and return what the agent observes."""

    async def step_async(self, action: ActT, timeout_s: float | None = None, **kwargs: Any) -> ObsT:
        return self.step(action, timeout_s=timeout_s, **kwargs)

    @property
    @abstractmethod
    def state(self) -> StateT: ...

    def get_metadata(self) -> EnvironmentMetadata:
        """What `/metadata` serves: the `openenv.yaml` of the environment's package, so the
        name, description and version are written once; OpenEnv's defaults without one."""
        from openenv.core.manifest import package_manifest

        name = type(self).__name__
        manifest = package_manifest(type(self).__module__)
        if manifest is None:
            return EnvironmentMetadata(
                name=name, description=f"{name} environment", version="1.0.0"
            )
        return EnvironmentMetadata(
            name=manifest.name,
            description=manifest.description or f"{name} environment",
            version=manifest.version,
        )

    def close(self) -> None:
        """Release resources; the server calls it exactly once when the session ends."""

    def warm_imports(self) -> None:
        """Import what this environment's first reset or step would import. A fork server
        (the local provider's zygote) calls it once before forking, so that each forked server
        does not pay those imports at its first step. It must not change any state."""

    # -- helpers for environment authors -------------------------------------------------

    def _apply_transform(self, observation: ObsT) -> ObsT:
        return self.transform(observation) if self.transform is not None else observation

    def _apply_rubric(self, action: ActT, observation: ObsT) -> float:
        """Score with the rubric now (a sync or async tree). The server then skips its own
        scoring of this step; without calling this, the server scores every step itself."""
        if self.rubric is None:
            return 0.0
        self._rubric_scored = True
        from openenv.core.rubrics import Rubric

        # Called on the class: a rubric may shadow `score` with an attribute (OpenEnv style).
        return Rubric.score(self.rubric, action, observation)

    async def _apply_rubric_async(self, action: ActT, observation: ObsT) -> float:
        if self.rubric is None:
            return 0.0
        self._rubric_scored = True
        from openenv.core.rubrics import Rubric

        return await Rubric.ascore(self.rubric, action, observation)

    def _reset_rubric(self) -> None:
        if self.rubric is not None:
            self.rubric.reset()

    async def _reset_rubric_async(self) -> None:
        if self.rubric is not None:
            await self.rubric.reset_async()


def overrides(env_cls: type, name: str) -> bool:
    """True when `env_cls` defines `name` itself rather than inheriting the base default."""
    return getattr(env_cls, name, None) is not getattr(Environment, name, None)


def state_class_of(env_cls: Any) -> type[State]:
    """Find an environment's State class without instantiating it.

    Looks at the generic parameters (`Environment[A, O, MyState]`) and then at the return
    annotation of the `state` property; falls back to the base `State`.
    """
    if not isinstance(env_cls, type):
        return State
    for klass in env_cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            args = typing.get_args(base)
            for arg in args:
                if isinstance(arg, type) and issubclass(arg, State):
                    return arg
    prop = inspect.getattr_static(env_cls, "state", None)
    fget = getattr(prop, "fget", None)
    if fget is not None:
        try:
            hint = typing.get_type_hints(fget).get("return")
        except Exception:
            hint = None
        if isinstance(hint, type) and issubclass(hint, State):
            return hint
    return State


def session_context_of(env: Any) -> AbstractAsyncContextManager[Any] | None:
    """The context a server holds open for a session's life: the environment's
    `session_context()` when it has one (MCPEnvironment's connects its client only once used),
    else OpenEnv's `mcp_session()` hook, else None."""
    hold = getattr(env, "session_context", None)
    if callable(hold):
        return hold()
    enter = getattr(env, "mcp_session", None)
    return enter() if callable(enter) else None
