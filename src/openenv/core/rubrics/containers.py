"""Rubrics that combine other rubrics: `Sequential`, `Gate`, `WeightedSum`, and the plain
holders `RubricList` and `RubricDict`.

Each scoring container evaluates its children inside its own forward (so its pre-hooks fire
before any child runs). When a child is async the container is async and awaits it
(`WeightedSum` awaits async children concurrently). When every child is sync the container is
sync too; as in OpenEnv, a `Sequential` called while an event loop is running returns an
awaitable (an `AwaitableScore`, which is also the float) unless it stopped early at a 0, and a
container with such a child returns one too.

Children given as a sequence are named ``rubric_0``, ``rubric_1``, ... (OpenEnv's names, used in
`named_rubrics`, `get_rubric` paths and `state_dict` keys).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from .base import AwaitableScore, Rubric, awaitable_if, loop_running

__all__ = ["Gate", "RubricDict", "RubricList", "Sequential", "WeightedSum"]


def _positional_name(index: int) -> str:
    return f"rubric_{index}"


def _require_rubric(value: Any, what: str) -> Rubric:
    if not isinstance(value, Rubric):
        raise TypeError(f"{what} must be a Rubric, got {type(value).__name__}")
    return value


class _IndexedMixin:
    """Index/name access shared by the ordered containers."""

    def __len__(self) -> int:
        return len(self.__dict__["_rubric_children"])

    def __iter__(self) -> Iterator[Rubric]:
        return iter(list(self.__dict__["_rubric_children"].values()))

    def __getitem__(self, key: int | str) -> Rubric:
        children = self.__dict__["_rubric_children"]
        if isinstance(key, str):
            return children[key]
        items = list(children.values())
        return items[key]


class Sequential(_IndexedMixin, Rubric):
    """Evaluate children in order and stop at the first one that scores 0.

    Returns 0.0 if a child scores 0, otherwise the last child's score; an empty Sequential
    scores 1.0. Children given positionally are named ``rubric_0``, ``rubric_1``, ...; keyword
    arguments name them (``Sequential(format=Fmt(), correct=Correct())``).
    """

    def __init__(self, *rubrics: Rubric, **named: Rubric) -> None:
        super().__init__()
        for index, rubric in enumerate(rubrics):
            self.add_rubric(
                _positional_name(index), _require_rubric(rubric, f"Sequential argument {index}")
            )
        for name, rubric in named.items():
            self.add_rubric(name, _require_rubric(rubric, f"Sequential argument {name!r}"))

    def forward(self, action: Any, observation: Any) -> float:
        # OpenEnv's rule for sync children: the result is awaitable when the loop runs, unless
        # a child scored 0 before any child's result was awaitable.
        score: float = 1.0
        deferred = False
        for child in self.children():
            score = child._evaluate(action, observation)
            deferred = deferred or isinstance(score, AwaitableScore)
            if score == 0:
                return awaitable_if(deferred, 0.0)
        return awaitable_if(deferred or loop_running(), score)

    async def forward_async(self, action: Any, observation: Any) -> float:
        score = 1.0
        for child in self.children():
            score = await child._aevaluate(action, observation)
            if score == 0:
                return 0.0
        return score


class Gate(Rubric):
    """Pass the child's score through when it reaches ``threshold``, else score 0."""

    def __init__(self, rubric: Rubric, threshold: float = 1.0) -> None:
        super().__init__()
        self.rubric = _require_rubric(rubric, "Gate's rubric")
        self.threshold = float(threshold)

    def _gate(self, score: float) -> float:
        return 0.0 if score < self.threshold else score

    def forward(self, action: Any, observation: Any) -> float:
        score = self.rubric._evaluate(action, observation)
        return awaitable_if(isinstance(score, AwaitableScore), self._gate(score))

    async def forward_async(self, action: Any, observation: Any) -> float:
        return self._gate(await self.rubric._aevaluate(action, observation))

    def own_state_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold}

    def load_own_state_dict(self, state: dict[str, Any]) -> None:
        if "threshold" in state:
            self.threshold = float(state["threshold"])

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}"


class WeightedSum(Rubric):
    """``sum(weight_i * score_i)`` over all children; the weights must sum to 1.

    ``rubrics`` is a sequence (children named ``rubric_0``, ``rubric_1``, ...) or a mapping of
    names to rubrics; ``weights`` is a sequence in the same order (or a mapping with the same
    keys).
    Every child is evaluated; async children run concurrently.
    """

    def __init__(
        self,
        rubrics: Sequence[Rubric] | Mapping[str, Rubric],
        weights: Sequence[float] | Mapping[str, float],
    ) -> None:
        super().__init__()
        if isinstance(rubrics, Mapping):
            named = list(rubrics.items())
        else:
            named = [(_positional_name(i), rubric) for i, rubric in enumerate(rubrics)]
        if isinstance(weights, Mapping):
            if not isinstance(rubrics, Mapping) or set(weights) != set(rubrics):
                raise ValueError("weights given as a mapping must have the same keys as rubrics")
            weight_list = [weights[name] for name, _ in named]
        else:
            weight_list = list(weights)
        if len(weight_list) != len(named):
            raise ValueError(
                f"WeightedSum needs one weight per rubric: got {len(named)} rubrics "
                f"and {len(weight_list)} weights"
            )
        self._weights = self._check_weights(weight_list)
        for name, rubric in named:
            self.add_rubric(name, _require_rubric(rubric, f"WeightedSum rubric {name!r}"))

    @staticmethod
    def _check_weights(weights: list[Any]) -> list[float]:
        values = [float(w) for w in weights]
        if not all(math.isfinite(w) for w in values):
            raise ValueError(f"WeightedSum weights must be finite numbers, got {values}")
        total = sum(values)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"WeightedSum weights must sum to 1.0 (within 1e-6), got {total}")
        return values

    @property
    def weights(self) -> list[float]:
        """A copy of the weights, in child order."""
        return list(self._weights)

    def forward(self, action: Any, observation: Any) -> float:
        scores = [child._evaluate(action, observation) for child in self.children()]
        total = sum(weight * score for weight, score in zip(self._weights, scores, strict=True))
        return awaitable_if(any(isinstance(s, AwaitableScore) for s in scores), total)

    async def forward_async(self, action: Any, observation: Any) -> float:
        children = list(self.children())
        scores: list[float] = [0.0] * len(children)
        pending: dict[int, asyncio.Future[float]] = {}
        try:
            for index, child in enumerate(children):
                if child.is_async:
                    pending[index] = asyncio.ensure_future(child._aevaluate(action, observation))
            for index, child in enumerate(children):
                if index not in pending:
                    scores[index] = float(child._evaluate(action, observation))
            if pending:
                for index, result in zip(
                    pending, await asyncio.gather(*pending.values()), strict=True
                ):
                    scores[index] = result
        except BaseException:
            for task in pending.values():
                task.cancel()
            await asyncio.gather(*pending.values(), return_exceptions=True)
            raise
        return sum(weight * score for weight, score in zip(self._weights, scores, strict=True))

    def own_state_dict(self) -> dict[str, Any]:
        return {"weights": self.weights}

    def load_own_state_dict(self, state: dict[str, Any]) -> None:
        if "weights" in state:
            weights = list(state["weights"])
            if len(weights) != len(self._weights):
                raise ValueError(
                    f"expected {len(self._weights)} weights, got {len(weights)} in state dict"
                )
            self._weights = self._check_weights(weights)

    def extra_repr(self) -> str:
        return f"weights={self._weights}"


class RubricList(_IndexedMixin, Rubric):
    """An ordered holder of rubrics (named ``rubric_0``, ``rubric_1``, ...). It does not score;
    calling it raises NotImplementedError."""

    def __init__(self, rubrics: Iterable[Rubric] | None = None) -> None:
        super().__init__()
        if rubrics is not None:
            self.extend(rubrics)

    def append(self, rubric: Rubric) -> RubricList:
        self.add_rubric(_positional_name(len(self)), _require_rubric(rubric, "RubricList item"))
        return self

    def extend(self, rubrics: Iterable[Rubric]) -> RubricList:
        for rubric in rubrics:
            self.append(rubric)
        return self

    def __call__(self, action: Any, observation: Any) -> Any:
        # Raise at once, as OpenEnv does, even when an item is async.
        return self._call_sync(action, observation)

    def forward(self, action: Any, observation: Any) -> float:
        raise NotImplementedError(
            "RubricList only holds rubrics and has no score of its own: evaluate its items "
            "(rubric_list[i](action, observation)) or combine them with WeightedSum or Sequential"
        )


class RubricDict(Rubric):
    """A holder of named rubrics with dict-style access. It does not score; calling it raises
    NotImplementedError."""

    def __init__(
        self, rubrics: Mapping[str, Rubric] | Iterable[tuple[str, Rubric]] | None = None
    ) -> None:
        super().__init__()
        if rubrics is not None:
            self.update(rubrics)

    def __getitem__(self, key: str) -> Rubric:
        return self.__dict__["_rubric_children"][key]

    def __setitem__(self, key: str, rubric: Rubric) -> None:
        self.add_rubric(key, _require_rubric(rubric, f"RubricDict[{key!r}]"))

    def __delitem__(self, key: str) -> None:
        self._remove_rubric(key)

    def __contains__(self, key: object) -> bool:
        return key in self.__dict__["_rubric_children"]

    def __len__(self) -> int:
        return len(self.__dict__["_rubric_children"])

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.__dict__["_rubric_children"]))

    def keys(self) -> list[str]:
        return list(self.__dict__["_rubric_children"].keys())

    def values(self) -> list[Rubric]:
        return list(self.__dict__["_rubric_children"].values())

    def items(self) -> list[tuple[str, Rubric]]:
        return list(self.__dict__["_rubric_children"].items())

    def update(self, rubrics: Mapping[str, Rubric] | Iterable[tuple[str, Rubric]]) -> None:
        pairs = rubrics.items() if isinstance(rubrics, Mapping) else rubrics
        for key, rubric in pairs:
            self[key] = rubric

    def __call__(self, action: Any, observation: Any) -> Any:
        # Raise at once, as OpenEnv does, even when an item is async.
        return self._call_sync(action, observation)

    def forward(self, action: Any, observation: Any) -> float:
        raise NotImplementedError(
            "RubricDict only holds rubrics and has no score of its own: evaluate its entries "
            "(rubric_dict[name](action, observation)) or combine them with WeightedSum or "
            "Sequential"
        )
