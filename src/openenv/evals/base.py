"""The evaluation contract: a task set in, one result per task and an aggregate out.

An infrastructure failure (the environment server died, the sandbox could not run, the model
endpoint stayed unreachable) says nothing about the model, so it is counted on its own and
never enters the mean reward or the success rate as a 0.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Union

import httpx

from openenv.core.errors import exception_message, is_infrastructure_error
from openenv.core.evals.base import EvalHarness as _OpenEnvEvalHarness
from openenv.core.llm_client import LLMUnavailableError

__all__ = [
    "EvalHarness",
    "EvalReport",
    "EvalTask",
    "TaskResult",
    "TaskSpec",
    "TaskStatus",
    "classify_failure",
    "normalize_tasks",
]

#: ``scored``: the episode ran and has a reward; ``infrastructure_error``: it could not run
#: (never scored); ``error``: it failed for another reason (the environment's code, a model
#: reply the client could not read), not scored either.
TaskStatus = Literal["scored", "infrastructure_error", "error"]


@dataclass(frozen=True)
class EvalTask:
    """One task of a task set: how to reset the environment into it."""

    id: str
    reset_kwargs: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


#: What callers may write for a task: an `EvalTask`, a task id (``reset(task_id=...)``), a seed
#: (``reset(seed=...)``, for environments whose tasks are drawn from a seed) or reset kwargs.
TaskSpec = Union[EvalTask, str, int, Mapping[str, Any]]


def normalize_tasks(tasks: Sequence[TaskSpec] | TaskSpec) -> list[EvalTask]:
    """Task specs as `EvalTask`s with unique ids, so results can be matched to tasks."""
    if isinstance(tasks, (EvalTask, str, int, Mapping)):
        tasks = [tasks]
    result: list[EvalTask] = []
    for spec in tasks:
        if isinstance(spec, EvalTask):
            task = spec
        elif isinstance(spec, bool):
            raise TypeError("a task is an EvalTask, a task id, a seed or reset kwargs, not a bool")
        elif isinstance(spec, int):
            task = EvalTask(id=f"seed-{spec}", reset_kwargs={"seed": spec})
        elif isinstance(spec, str):
            if not spec:
                raise ValueError("a task id must not be empty")
            task = EvalTask(id=spec, reset_kwargs={"task_id": spec})
        elif isinstance(spec, Mapping):
            kwargs = dict(spec)
            name = kwargs.get("task_id", kwargs.get("seed"))
            label = str(name) if name is not None else json.dumps(kwargs, sort_keys=True)
            task = EvalTask(id=label, reset_kwargs=kwargs)
        else:
            raise TypeError(
                "a task is an EvalTask, a task id, a seed or reset kwargs, "
                f"got {type(spec).__name__}"
            )
        result.append(task)
    seen: dict[str, int] = {}
    unique: list[EvalTask] = []
    for task in result:
        count = seen.get(task.id, 0)
        seen[task.id] = count + 1
        if count:  # the same task twice (e.g. epochs): keep both, tell them apart
            task = EvalTask(f"{task.id}#{count + 1}", task.reset_kwargs, task.metadata)
        unique.append(task)
    return unique


def classify_failure(exc: BaseException) -> TaskStatus:
    """``infrastructure_error`` for failures outside the model and the environment's logic."""
    if isinstance(exc, (LLMUnavailableError, httpx.TransportError)) or is_infrastructure_error(exc):
        return "infrastructure_error"
    return "error"


@dataclass
class TaskResult:
    """The outcome of one task. ``reward`` and ``success`` are None unless ``status`` is
    ``scored``: a failed episode has no reward, not a reward of 0."""

    task_id: str
    status: TaskStatus
    reward: float | None = None
    success: bool | None = None
    done: bool = False
    turns: int = 0
    step_rewards: list[float] = field(default_factory=list)
    error: str | None = None
    reset_kwargs: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    #: The conversation (OpenAI chat format), when the harness keeps it.
    transcript: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))


@dataclass
class EvalReport:
    """Per-task results and their aggregate; ``to_dict()`` is plain JSON."""

    harness: str
    results: list[TaskResult]
    model: str | None = None
    environment: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def scored(self) -> list[TaskResult]:
        return [r for r in self.results if r.status == "scored"]

    @property
    def mean_reward(self) -> float | None:
        """Mean over scored tasks only; None when none was scored."""
        scored = self.scored
        return sum(r.reward or 0.0 for r in scored) / len(scored) if scored else None

    @property
    def success_rate(self) -> float | None:
        scored = self.scored
        return sum(1 for r in scored if r.success) / len(scored) if scored else None

    @property
    def infrastructure_failures(self) -> int:
        return sum(1 for r in self.results if r.status == "infrastructure_error")

    @property
    def errors(self) -> int:
        return sum(1 for r in self.results if r.status == "error")

    def aggregate(self) -> dict[str, Any]:
        return {
            "tasks": len(self.results),
            "scored": len(self.scored),
            "mean_reward": self.mean_reward,
            "success_rate": self.success_rate,
            "infrastructure_failures": self.infrastructure_failures,
            "errors": self.errors,
        }

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(
            {
                "harness": self.harness,
                "model": self.model,
                "environment": self.environment,
                "aggregate": self.aggregate(),
                "results": [r.to_dict() for r in self.results],
                "metadata": self.metadata,
            }
        )

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)


class EvalHarness(_OpenEnvEvalHarness, ABC):
    """Runs a model or agent over an environment's task set.

    Subclasses implement `run_task` (one episode; raise on failure, the harness classifies
    it) and may override `default_tasks`. `evaluate` runs tasks concurrently, bounded by
    ``max_concurrency``, and one task's failure never stops the others. It is also OpenEnv's
    `openenv.core.evals.EvalHarness`: `run` / `run_from_config` evaluate and return the
    aggregate as the scores.
    """

    max_concurrency: int = 4

    def run(
        self,
        harness_version: str,
        library_versions: dict[str, str],
        dataset: str,
        eval_parameters: dict[str, Any],
    ) -> dict[str, Any]:
        """OpenEnv's entry point: ``eval_parameters`` may give ``tasks`` and
        ``max_concurrency``; the scores are `EvalReport.aggregate()`."""
        del harness_version, library_versions, dataset  # recorded by run_from_config
        report = self.evaluate(
            eval_parameters.get("tasks"), max_concurrency=eval_parameters.get("max_concurrency")
        )
        return report.aggregate()

    def default_tasks(self) -> list[EvalTask]:
        """The task set used when `evaluate` is given none."""
        raise ValueError(f"{self.name} has no default task set: pass tasks=")

    @abstractmethod
    async def run_task(self, task: EvalTask) -> TaskResult:
        """Run one task to its end and return a scored result."""

    def describe(self) -> dict[str, Any]:
        """What the report says about the model and environment (``model``, ``environment``)."""
        return {}

    async def _run_one(self, task: EvalTask, gate: asyncio.Semaphore) -> TaskResult:
        async with gate:
            started = time.monotonic()
            try:
                result = await self.run_task(task)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                result = TaskResult(
                    task_id=task.id,
                    status=classify_failure(exc),
                    error=exception_message(exc),
                    reset_kwargs=dict(task.reset_kwargs),
                    metadata=dict(task.metadata),
                )
            if not result.duration_s:
                result.duration_s = time.monotonic() - started
            return result

    async def aevaluate(
        self,
        tasks: Sequence[TaskSpec] | TaskSpec | None = None,
        *,
        max_concurrency: int | None = None,
    ) -> EvalReport:
        """Every task's result, in the order the tasks were given."""
        task_list = normalize_tasks(tasks) if tasks is not None else self.default_tasks()
        limit = max_concurrency or self.max_concurrency
        if limit < 1:
            raise ValueError("max_concurrency must be >= 1")
        gate = asyncio.Semaphore(limit)
        results = await asyncio.gather(*(self._run_one(task, gate) for task in task_list))
        info = self.describe()
        return EvalReport(
            harness=self.name,
            results=list(results),
            model=info.get("model"),
            environment=info.get("environment"),
            metadata={k: v for k, v in info.items() if k not in ("model", "environment")},
        )

    def evaluate(
        self,
        tasks: Sequence[TaskSpec] | TaskSpec | None = None,
        *,
        max_concurrency: int | None = None,
    ) -> EvalReport:
        """`aevaluate` for synchronous callers (not from inside a running event loop)."""
        return asyncio.run(self.aevaluate(tasks, max_concurrency=max_concurrency))


def _jsonable(value: Any) -> Any:
    """A JSON-safe copy: environments may put anything in metadata."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _jsonable(dump(mode="json"))
    return str(value)
