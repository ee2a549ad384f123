"""The `Rubric` base class: a composable, inspectable reward function.

A rubric maps ``(action, observation)`` to a float. Rubrics nest like ``torch.nn.Module``:
assigning a rubric to an attribute of another registers it as a child, and the tree can then
be walked (``named_rubrics``), inspected (``last_score``, ``component_scores``), hooked and
saved (``state_dict``).

Sync and async
--------------
``forward`` may be a plain method or an ``async def``. A rubric is *async* when its own
``forward`` or one of its hooks is a coroutine function, or when any descendant is async
(see `Rubric.is_async`). Three ways to evaluate one:

* ``rubric(action, obs)``, as in OpenEnv: for an async tree an awaitable of the float; for a
  sync tree the float, except where OpenEnv hands back an awaitable -- a `Sequential` called
  while an event loop runs in this thread (unless it stopped early at a 0), and any rubric that
  evaluated such a child. That awaitable is an `AwaitableScore`: a ``float`` that can also be
  awaited, so both ``await rubric(...)`` and plain arithmetic on the result work. A rubric
  whose own ``forward`` and hooks are sync (say, one dispatching to one of several children)
  runs ``forward`` at once and returns an awaitable only if ``forward`` returned one, as in
  OpenEnv.
* ``rubric.score(action, obs)``: always returns a float. An async tree runs to completion on a
  fresh event loop (on a short-lived helper thread when this thread already runs a loop), so
  it blocks; prefer ``ascore`` in async code.
* ``await rubric.ascore(action, obs)``: always awaitable, for either kind. A sync tree runs
  inline on the calling loop (rubrics are expected to be quick).

The framework itself never calls ``rubric.score``: a rubric written for OpenEnv may keep its
last result in a ``score`` attribute, which then hides the method on that instance only
(``Rubric.score(rubric, action, obs)`` still works).

Order of one evaluation
-----------------------
1. forward pre-hooks ``hook(rubric, action, observation)``, in registration order;
2. ``forward`` -- a container evaluates its children *inside* its forward, so each child goes
   through its own steps 1-4 during step 2 of its parent: a container's pre-hooks fire before
   any of its children runs, and its post-hooks after all of them;
3. ``last_score`` is set to the result;
4. forward hooks ``hook(rubric, action, observation, score)``, in registration order.

Hooks observe; their return values are ignored. In an async tree hooks may be ``async def``
(an async hook makes its rubric, and therefore every ancestor, async).

When an evaluation starts at the top of a tree, ``last_score`` is cleared on every rubric of
that tree, so after it ``last_score`` is the score from *this* evaluation, or ``None`` for
rubrics that were skipped (e.g. after a `Sequential` failed fast). `Rubric.component_scores`
reports exactly the rubrics that scored.

Errors
------
An exception raised by a rubric's forward or hooks propagates unchanged, with its own type (as
in OpenEnv). The evaluation adds a note naming the failing rubric's dot path relative to the
rubric that was called, and `failed_rubric_path` returns that path. A failing rubric never
turns into a score of 0.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import Any

from openenv.core.utils import run_coroutine_sync

__all__ = ["AwaitableScore", "RemovableHandle", "Rubric", "RubricError", "failed_rubric_path"]

PreHook = Callable[["Rubric", Any, Any], Any]
PostHook = Callable[["Rubric", Any, Any, float], Any]

# Set (to a token identifying it) while a tree evaluation runs, so only the outermost call
# clears stale scores and reports failures.
_IN_EVALUATION: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "openenv_rubric_in_evaluation", default=None
)
# Set while `reset_async` runs a rubric's own `reset`, which must then not recurse.
_SHALLOW_RESET: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "openenv_rubric_shallow_reset", default=False
)
_HOOK_IDS = itertools.count()


class AwaitableScore(float):
    """A score that can also be awaited (``await`` gives the plain float).

    Returned by ``rubric(action, obs)`` where OpenEnv returns an awaitable for a sync tree (see
    the module docstring), so OpenEnv code that awaits it works, and code that uses it as a
    number works too.
    """

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, float]:
        return float(self)
        yield  # pragma: no cover - makes this a generator


def loop_running() -> bool:
    """True when this thread is running an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def awaitable_if(deferred: bool, score: float) -> float:
    """``score`` as an `AwaitableScore` when ``deferred``, else as a plain float."""
    return AwaitableScore(score) if deferred else float(score)


# Attributes an evaluation sets on an exception that escapes it (see `failed_rubric_path`).
_FAILED_RUBRIC = "_openenv_failed_rubric"
_FAILED_PATH = "_openenv_rubric_path"


def failed_rubric_path(exc: BaseException) -> str | None:
    """The dot path of the rubric that raised ``exc`` during an evaluation, relative to the
    rubric that was called (``""`` for that rubric itself); None if no rubric raised it."""
    path = getattr(exc, _FAILED_PATH, None)
    return path if isinstance(path, str) else None


def add_note(exc: BaseException, note: str) -> None:
    """`exc.add_note(note)`, also on Python 3.10 (which has no `add_note`)."""
    native = getattr(exc, "add_note", None)
    if native is not None:
        native(note)
        return
    notes = getattr(exc, "__notes__", None)  # Python 3.10: keep the note for code that looks
    try:
        exc.__notes__ = [*(notes or []), note]  # type: ignore[attr-defined]
    except AttributeError:
        pass


class RubricError(Exception):
    """A failure this package reports about a rubric (`JudgeError` is one).

    Exceptions raised by a rubric's own code are not wrapped in it: they propagate with their own
    type (see the module docstring). ``path`` is the dot path of the failing rubric relative to the
    rubric that was called (``""`` for that rubric itself), ``rubric`` the failing rubric object
    and ``cause`` the underlying exception, if any (also available as ``__cause__``).
    """

    def __init__(
        self,
        path: str = "",
        cause: BaseException | None = None,
        *,
        rubric: Rubric | None = None,
        message: str | None = None,
    ) -> None:
        super().__init__(path, cause)
        self.path = path
        self.cause = cause
        self.rubric = rubric
        self.message = message

    def __str__(self) -> str:
        where = f"rubric {self.path!r}" if self.path else "rubric <root>"
        if self.rubric is not None:
            where += f" ({type(self.rubric).__name__})"
        if self.message:
            detail = self.message
        elif self.cause is not None:
            detail = f"{type(self.cause).__name__}: {self.cause}"
        else:
            detail = "unknown error"
        return f"{where} failed: {detail}"

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable across processes; the failing rubric object itself is not carried along.
        state = {**self.__dict__, "rubric": None}
        return (_restore_error, (type(self), self.args, state))


def _restore_error(cls: type[RubricError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = Exception.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class RemovableHandle:
    """Returned by hook registration; ``remove()`` unregisters the hook (idempotent)."""

    def __init__(self, hooks: dict[int, Callable[..., Any]], key: int) -> None:
        self._hooks = hooks
        self._key = key

    def remove(self) -> None:
        self._hooks.pop(self._key, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()


def is_async_callable(fn: Any) -> bool:
    """True for coroutine functions, also behind `functools.partial` or an async ``__call__``."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - looking for an async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def _discard(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if inspect.iscoroutine(awaitable) and close is not None:
        close()


def _as_score(value: Any) -> float:
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"a rubric must return a number, got {type(value).__name__}")
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"a rubric must return a number, got {type(value).__name__}") from None
    if not math.isfinite(score):
        raise ValueError(f"a rubric returned a non-finite score: {score}")
    return score


def _own_state_of(rubric: Rubric) -> dict[str, Any]:
    if type(rubric).state_dict is not Rubric.state_dict:  # OpenEnv style: overrides state_dict
        return dict(rubric.state_dict())
    return rubric.own_state_dict()


def _overrides_reset_async(rubric: Rubric) -> bool:
    return type(rubric).reset_async is not Rubric.reset_async


class Rubric(ABC):
    """Base class of all rubrics. Subclasses implement `forward` (sync or ``async def``).

    ``rubric(action, obs)`` returns an awaitable of a float when any part of the tree is async
    (`is_async`), else a float -- an `AwaitableScore` where OpenEnv returns an awaitable (see the
    module docstring); `score` is always sync, `ascore` always awaitable. A composite written
    by hand should declare ``async def forward`` and ``await child.ascore(...)`` if any child
    may be async.

    Children are registered by assigning a rubric to an attribute (``self.fmt = Fmt()``) or
    with `add_rubric` (for names that are not identifiers). Subclasses need not call
    ``super().__init__()`` before assigning children, but should call it anyway.
    """

    last_score: float | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Rubric:
        self = super().__new__(cls)
        state = self.__dict__
        state["_rubric_children"] = {}
        state["_forward_pre_hooks"] = {}
        state["_forward_hooks"] = {}
        state["last_score"] = None
        return self

    def __init__(self) -> None:  # noqa: B027 - nothing to set up; kept for super().__init__()
        pass

    # -- scoring -------------------------------------------------------------------------

    @abstractmethod
    def forward(self, action: Any, observation: Any) -> float | Awaitable[float]:
        """Score one step. May be declared ``async def``."""

    async def forward_async(self, action: Any, observation: Any) -> float:
        """What an async evaluation runs in place of `forward`.

        The default awaits `forward` (or its result). Containers override it to await their
        children (concurrently where that is allowed) while `forward` calls them synchronously.
        """
        result = self.forward(action, observation)
        if inspect.isawaitable(result):
            result = await result
        return result

    @property
    def is_async(self) -> bool:
        """True when evaluating this rubric needs awaiting (see the module docstring)."""
        if self._forward_is_async():
            return True
        hooks = self.__dict__["_forward_pre_hooks"], self.__dict__["_forward_hooks"]
        if any(is_async_callable(h) for group in hooks for h in group.values()):
            return True
        return any(child.is_async for child in self.children())

    def _forward_is_async(self) -> bool:
        """Whether this rubric's own scoring is async (ignoring hooks and children)."""
        return is_async_callable(self.forward)

    def __call__(self, action: Any, observation: Any) -> Any:
        """Evaluate: the float, or an awaitable of it where OpenEnv gives one (module doc)."""
        if self.is_async and not self._runs_forward_first():
            return self._call_async(action, observation)
        return self._call_sync(action, observation)

    def _runs_forward_first(self) -> bool:
        """OpenEnv's rule for a rubric whose own ``forward`` and hooks are sync (a hand-written
        composite dispatching to children): ``__call__`` runs ``forward`` at once and is
        awaitable only when ``forward`` hands back an awaitable (an async child's result)."""
        if type(self).forward_async is not Rubric.forward_async or self._forward_is_async():
            return False
        hooks = self.__dict__["_forward_pre_hooks"], self.__dict__["_forward_hooks"]
        return not any(is_async_callable(h) for group in hooks for h in group.values())

    def score(self, action: Any, observation: Any) -> float:
        """Evaluate and return a float, running an async tree to completion (blocking)."""
        return float(self._evaluate(action, observation))

    async def ascore(self, action: Any, observation: Any) -> float:
        """Evaluate from async code, whether the tree is sync or async."""
        return float(await self._aevaluate(action, observation))

    def _evaluate(self, action: Any, observation: Any) -> float:
        """`score` for the framework's own use (never shadowed by a ``score`` attribute).

        For a sync tree the result may be an `AwaitableScore` (containers pass that on).
        """
        if self.is_async:
            return run_coroutine_sync(self._call_async(action, observation))
        result = self._call_sync(action, observation)
        if inspect.iscoroutine(result):  # forward handed back an awaitable
            return run_coroutine_sync(result)
        return result

    async def _aevaluate(self, action: Any, observation: Any) -> float:
        if self.is_async:
            return await self._call_async(action, observation)
        result = self._call_sync(action, observation)
        if inspect.iscoroutine(result):
            result = await result
        return float(result)

    def _begin_evaluation(self) -> contextvars.Token[object | None] | None:
        if _IN_EVALUATION.get() is not None:
            return None
        self.last_score = None
        for rubric in self.rubrics():
            rubric.last_score = None
        return _IN_EVALUATION.set(object())

    def _call_sync(self, action: Any, observation: Any) -> Any:
        """Evaluate with a sync ``forward``: a float (or `AwaitableScore`), or -- when
        ``forward`` handed back an awaitable, as OpenEnv allows -- a coroutine finishing it."""
        token = self._begin_evaluation()
        try:
            for hook in list(self.__dict__["_forward_pre_hooks"].values()):
                self._sync_hook_result(hook(self, action, observation))
            result = self.forward(action, observation)
            if inspect.isawaitable(result) and not isinstance(result, AwaitableScore):
                return self._finish_awaited(result, action, observation)
            score = _as_score(result)
            self.last_score = score
            for hook in list(self.__dict__["_forward_hooks"].values()):
                self._sync_hook_result(hook(self, action, observation, score))
            # A forward that passed on a child's awaitable result makes this one awaitable too.
            return awaitable_if(isinstance(result, AwaitableScore), score)
        except Exception as exc:
            self._record_failure(exc, outermost=token is not None)
            raise
        finally:
            if token is not None:
                _IN_EVALUATION.reset(token)

    async def _finish_awaited(self, pending: Any, action: Any, observation: Any) -> float:
        """The rest of a sync evaluation whose ``forward`` returned an awaitable."""
        token = None if _IN_EVALUATION.get() is not None else _IN_EVALUATION.set(object())
        try:
            score = _as_score(await pending)
            self.last_score = score
            for hook in list(self.__dict__["_forward_hooks"].values()):
                result = hook(self, action, observation, score)
                if inspect.isawaitable(result):
                    await result
            return score
        except Exception as exc:
            self._record_failure(exc, outermost=token is not None)
            raise
        finally:
            if token is not None:
                _IN_EVALUATION.reset(token)

    async def _call_async(self, action: Any, observation: Any) -> float:
        token = self._begin_evaluation()
        try:
            for hook in list(self.__dict__["_forward_pre_hooks"].values()):
                result = hook(self, action, observation)
                if inspect.isawaitable(result):
                    await result
            score = _as_score(await self.forward_async(action, observation))
            self.last_score = score
            for hook in list(self.__dict__["_forward_hooks"].values()):
                result = hook(self, action, observation, score)
                if inspect.isawaitable(result):
                    await result
            return score
        except Exception as exc:
            self._record_failure(exc, outermost=token is not None)
            raise
        finally:
            if token is not None:
                _IN_EVALUATION.reset(token)

    @staticmethod
    def _sync_hook_result(result: Any) -> None:
        if inspect.isawaitable(result):
            _discard(result)
            raise TypeError(
                "a hook returned an awaitable in a sync evaluation; declare it async def"
            )

    def _record_failure(self, exc: Exception, *, outermost: bool) -> None:
        """Remember the innermost rubric ``exc`` escaped from; at the top of the evaluation
        turn that into its dot path (`failed_rubric_path`) and a note on the exception."""
        state = getattr(exc, "__dict__", None)
        evaluation = _IN_EVALUATION.get()
        if state is None or evaluation is None:
            return
        entry = state.get(_FAILED_RUBRIC)
        if entry is None or entry[0] is not evaluation:  # not yet seen in this evaluation
            state[_FAILED_RUBRIC] = entry = (evaluation, self)
        if not outermost:
            return
        del state[_FAILED_RUBRIC]  # the rubric object must not travel with the exception
        failed = entry[1]
        path = self._path_of(failed) or ""
        state[_FAILED_PATH] = path
        if isinstance(exc, RubricError):
            exc.path, exc.rubric = path, failed
        where = repr(path) if path else "<root>"
        add_note(exc, f"raised by rubric {where} ({type(failed).__name__})")

    def _path_of(self, target: Rubric) -> str | None:
        if target is self:
            return ""
        for path, rubric in self.named_rubrics():
            if rubric is target:
                return path
        return None

    # -- hooks ---------------------------------------------------------------------------

    def register_forward_pre_hook(self, hook: PreHook) -> RemovableHandle:
        """Call ``hook(rubric, action, observation)`` before each evaluation of this rubric."""
        return self._add_hook(self.__dict__["_forward_pre_hooks"], hook)

    def register_forward_hook(self, hook: PostHook) -> RemovableHandle:
        """Call ``hook(rubric, action, observation, score)`` after ``last_score`` is set."""
        return self._add_hook(self.__dict__["_forward_hooks"], hook)

    @staticmethod
    def _add_hook(
        hooks: dict[int, Callable[..., Any]], hook: Callable[..., Any]
    ) -> RemovableHandle:
        if not callable(hook):
            raise TypeError(f"a hook must be callable, got {type(hook).__name__}")
        key = next(_HOOK_IDS)
        hooks[key] = hook
        return RemovableHandle(hooks, key)

    # -- children ------------------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        children = self.__dict__["_rubric_children"]
        if isinstance(value, Rubric):
            self._check_child(name, value)
            attribute = inspect.getattr_static(type(self), name, None)
            hides = callable(attribute) or hasattr(attribute, "__get__")
            # `score`/`ascore` are ours, not OpenEnv's, and nothing here calls them on a rubric:
            # OpenEnv code may use those names for children (Rubric.score(...) still works).
            if hides and attribute not in (Rubric.score, Rubric.ascore):
                raise AttributeError(
                    f"cannot register a child rubric as {name!r}: it would hide "
                    f"{type(self).__name__}.{name}; use another name or add_rubric()"
                )
            children[name] = value
            self.__dict__[name] = value
            return
        if name in children:
            del children[name]
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        children = self.__dict__["_rubric_children"]
        if name in children:
            del children[name]
            self.__dict__.pop(name, None)
            return
        object.__delattr__(self, name)

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: children added under non-identifier names.
        children = self.__dict__.get("_rubric_children")
        if children is not None and name in children:
            return children[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def add_rubric(self, name: str, rubric: Rubric) -> None:
        """Register ``rubric`` as a child under ``name`` (need not be an identifier)."""
        if not isinstance(rubric, Rubric):
            raise TypeError(f"expected a Rubric, got {type(rubric).__name__}")
        self._check_child(name, rubric)
        if isinstance(self.__dict__.get(name), Rubric):
            del self.__dict__[name]
        self.__dict__["_rubric_children"][name] = rubric

    def _remove_rubric(self, name: str) -> Rubric:
        rubric = self.__dict__["_rubric_children"].pop(name)
        if self.__dict__.get(name) is rubric:
            del self.__dict__[name]
        return rubric

    def _check_child(self, name: str, rubric: Rubric) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"invalid child rubric name {name!r}: must be non-empty without '.'")
        if rubric is self or any(r is self for r in rubric.rubrics()):
            raise ValueError(
                f"cannot add {type(rubric).__name__} as {name!r}: it would create a cycle"
            )

    def named_children(self) -> Iterator[tuple[str, Rubric]]:
        """Direct children as ``(name, rubric)`` in registration order."""
        yield from list(self.__dict__["_rubric_children"].items())

    def children(self) -> Iterator[Rubric]:
        """Direct children in registration order."""
        for _, child in self.named_children():
            yield child

    def named_rubrics(self, prefix: str = "") -> Iterator[tuple[str, Rubric]]:
        """All descendants (depth first, pre-order) with dot paths. A rubric registered in two
        places is listed under both paths, as in OpenEnv."""
        for name, child in self.named_children():
            path = f"{prefix}.{name}" if prefix else name
            yield path, child
            yield from child.named_rubrics(path)

    def rubrics(self) -> Iterator[Rubric]:
        """All descendants (depth first, pre-order; a shared one once per path), not including
        this rubric."""
        for _, rubric in self.named_rubrics():
            yield rubric

    def get_rubric(self, path: str) -> Rubric:
        """The descendant at dot path ``path`` (e.g. ``"checks.format"``); KeyError if absent."""
        rubric: Rubric = self
        walked: list[str] = []
        for part in path.split("."):
            children = rubric.__dict__["_rubric_children"]
            if part not in children:
                where = ".".join(walked) or f"<root> ({type(self).__name__})"
                available = ", ".join(repr(n) for n in children) or "none"
                raise KeyError(
                    f"Rubric path not found: {path!r}: {where} has no child {part!r} "
                    f"(children: {available})"
                )
            rubric = children[part]
            walked.append(part)
        return rubric

    def component_scores(self) -> dict[str, float]:
        """``{dot_path: last_score}`` for every descendant that scored in the last evaluation."""
        return {
            path: rubric.last_score
            for path, rubric in self.named_rubrics()
            if rubric.last_score is not None
        }

    # -- episode lifecycle ---------------------------------------------------------------

    def reset(self) -> None:
        """Clear per-episode state here and in every descendant.

        Override to clear your own state and call ``super().reset()``. Children that define
        their own `reset_async` have it run to completion.
        """
        self.last_score = None
        if _SHALLOW_RESET.get():
            return
        for child in self.children():
            if _overrides_reset_async(child):
                run_coroutine_sync(child.reset_async())
            else:
                child.reset()

    async def reset_async(self) -> None:
        """Awaitable `reset`: runs this rubric's `reset` for itself, then awaits each child's.

        Override for asynchronous cleanup and call ``await super().reset_async()``.
        """
        token = _SHALLOW_RESET.set(True)
        try:
            self.reset()
        finally:
            _SHALLOW_RESET.reset(token)
        for child in self.children():
            await child.reset_async()

    # -- state ---------------------------------------------------------------------------

    def own_state_dict(self) -> dict[str, Any]:
        """This rubric's own configuration/state (keys without dots). Default: empty."""
        return {}

    def load_own_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027
        """Apply entries of `own_state_dict` (any subset). Default: nothing to load."""

    def state_dict(self) -> dict[str, Any]:
        """Own state plus every descendant's, keyed by dot path (``"judge.prompt_template"``).

        A descendant written for OpenEnv, which overrides ``state_dict`` itself, contributes
        what its ``state_dict()`` returns.
        """
        state = dict(self.own_state_dict())
        for path, rubric in self.named_rubrics():
            for key, value in _own_state_of(rubric).items():
                state[f"{path}.{key}"] = value
        return state

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        """Load a `state_dict`. Missing keys keep their values; unknown keys raise KeyError
        when ``strict`` (and are ignored otherwise)."""
        expected = self.state_dict()
        unexpected = [key for key in state if key not in expected]
        if strict and unexpected:
            raise KeyError(f"unexpected keys in rubric state dict: {unexpected}")
        by_path: dict[str, Rubric] = {"": self, **dict(self.named_rubrics())}
        grouped: dict[str, dict[str, Any]] = {}
        for key, value in state.items():
            if key in expected:
                path, _, name = key.rpartition(".")
                grouped.setdefault(path, {})[name] = value
        for path, own in grouped.items():
            target = by_path[path]
            if path and type(target).load_state_dict is not Rubric.load_state_dict:
                target.load_state_dict(own)  # written for OpenEnv: it loads its own keys
            else:
                target.load_own_state_dict(own)

    # -- display -------------------------------------------------------------------------

    def extra_repr(self) -> str:
        """Extra text shown inside this rubric's repr."""
        return ""

    def __repr__(self) -> str:
        lines = [
            f"({name}): " + repr(child).replace("\n", "\n  ")
            for name, child in self.named_children()
        ]
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"
