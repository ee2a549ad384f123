"""Python execution for agents: every step's code runs in `openenv.sandbox.Sandbox`.

Free-form, each step runs the code and reports what happened. With a task (`reset(task_id=...)`
or `reset(tests=[...])`), a separate judge process also checks the code against hidden tests and
the reward comes from `CodingRubric`. See the README for every reset option.
"""

from __future__ import annotations

import os
from typing import Any, Optional
from uuid import uuid4

from pydantic import TypeAdapter, ValidationError

from openenv.core.env_server import Environment, InvalidActionError
from openenv.sandbox import ExecStatus, Sandbox, SandboxLimits

from ..models import CodeAction, CodeObservation, CodeState, ExceptionInfo, TestResult
from ..rubrics import CodingRubric
from ..tasks import (
    TASKS_FILE,
    Task,
    TestCase,
    custom_task,
    pick_task,
    same_value,
    shipped_tasks,
)
from .executor import CellResult, Executor

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_TASK_STEPS = 5
_CASES = TypeAdapter(list[TestCase])


def _env_flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    return raw.strip().lower() not in ("0", "false", "no", "off")


def _invalid(field: str, message: str) -> InvalidActionError:
    return InvalidActionError(
        message, errors=[{"loc": [field], "msg": message, "type": "value_error"}]
    )


def _number(name: str, value: Any, kind: Any, low: Any, high: Any) -> Any:
    """A reset option as `kind` within [low, high], or a VALIDATION_ERROR naming it."""
    if value is None:
        return None
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise _invalid(name, f"{name} must be a number, got {value!r}") from None
    if number < low or (high is not None and number > high):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise _invalid(name, f"{name} must be {bounds}, got {value!r}")
    return number


class CodingEnvironment(Environment[CodeAction, CodeObservation, CodeState]):
    """Runs Python for an agent, optionally against a task's hidden tests."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own sandbox and interpreter

    def __init__(self, *, limits: Optional[SandboxLimits] = None) -> None:
        super().__init__(rubric=CodingRubric())
        timeout = float(os.environ.get("CODING_ENV_TIMEOUT_S") or DEFAULT_TIMEOUT_S)
        self._default_timeout_s = timeout
        self._default_persistent = _env_flag("CODING_ENV_PERSISTENT", True)
        # The tasks' expected values stay out of the agent's reach (under bubblewrap).
        self._box = Sandbox(
            limits=limits or SandboxLimits(wall_time_s=timeout), hidden=[TASKS_FILE]
        )
        warm = _env_flag("CODING_ENV_WARM", True) and self._default_persistent
        self._executor = Executor(self._box, warm=warm)
        self._started = self._done = False
        self._task: Optional[Task] = None
        self._max_steps: Optional[int] = None
        self._clean_cells: list[str] = []
        self._lost = False
        self._state = CodeState(backend=self._box.backend)

    # -- reset -------------------------------------------------------------------------------

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        task_id: Optional[str] = None,
        tests: Any = None,
        prompt: str = "",
        persistent: Optional[bool] = None,
        timeout_s: Optional[float] = None,
        max_steps: Optional[int] = None,
        **kwargs: Any,
    ) -> CodeObservation:
        task = self._choose_task(task_id, tests, prompt, seed)
        timeout_s = _number("timeout_s", timeout_s, float, low=1e-3, high=300.0)
        max_steps = _number("max_steps", max_steps, int, low=1, high=None)
        persistent = self._default_persistent if persistent is None else bool(persistent)
        self._executor.reset(persistent=persistent, timeout_s=timeout_s or self._default_timeout_s)
        self._started = True
        self._task = task
        self._max_steps = (
            max_steps if max_steps is not None else (DEFAULT_TASK_STEPS if task else None)
        )
        self._clean_cells = []
        self._lost = self._done = False
        self._state = CodeState(
            episode_id=episode_id or str(uuid4()),
            task_id=task.id if task else None,
            persistent=persistent,
            backend=self._box.backend,
        )
        return CodeObservation(
            backend=self._box.backend,
            persistent=persistent,
            task_id=self._state.task_id,
            prompt=task.prompt if task else "",
            tests_total=len(task.cases) if task else 0,
        )

    def _choose_task(
        self, task_id: Optional[str], tests: Any, prompt: str, seed: Optional[int]
    ) -> Optional[Task]:
        if tests is not None:
            if task_id is not None:
                raise _invalid("tests", "give task_id or tests, not both")
            try:
                cases = _CASES.validate_python(tests)
                return custom_task(cases, prompt=str(prompt or ""))
            except ValidationError as exc:
                raise _invalid(
                    "tests",
                    'tests must be a non-empty list of {"call": "f(1)", "expected": <JSON>}: '
                    + str(exc.errors(include_url=False)[:2]),
                ) from None
        if task_id is None:
            return None
        try:
            return pick_task(str(task_id), seed)
        except KeyError:
            known = ", ".join(["random", *sorted(shipped_tasks())])
            raise _invalid(
                "task_id", f"unknown task_id {task_id!r}; choose one of {known}"
            ) from None

    # -- step --------------------------------------------------------------------------------

    def step(
        self, action: CodeAction, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> CodeObservation:
        if not self._started:
            raise _invalid("code", "call reset() before step()")
        if self._done:
            raise _invalid("code", "the episode is over: call reset()")
        restarted, self._lost = self._lost, False
        cell = self._executor.execute(action.code)
        persistent = self._executor.persistent
        if cell.interpreter_lost:
            self._lost = True
            self._state.restarts += 1
            self._clean_cells = []  # the namespace went with the interpreter
            self._executor.restart_if_lost()
        # The code the judge runs mirrors what the agent's namespace holds now.
        if cell.status is ExecStatus.OK:
            self._clean_cells = [*self._clean_cells, action.code] if persistent else [action.code]
        elif not persistent:
            self._clean_cells = []
        obs = self._observe(cell, restarted)
        if self._task is not None:
            self._run_tests(obs)
        self._state.step_count += 1
        self._state.last_exit_code = cell.exit_code
        all_passed = self._task is not None and obs.tests_passed == obs.tests_total
        out_of_steps = self._max_steps is not None and self._state.step_count >= self._max_steps
        obs.done = self._done = all_passed or out_of_steps
        return obs

    def _observe(self, cell: CellResult, restarted: bool) -> CodeObservation:
        return CodeObservation(
            stdout=cell.stdout,
            stderr=cell.stderr,
            exit_code=cell.exit_code,
            status=cell.status,
            exception=ExceptionInfo(**cell.exception) if cell.exception else None,
            duration_s=cell.duration_s,
            truncated=cell.truncated,
            message=cell.message,
            backend=self._box.backend,
            persistent=self._executor.persistent,
            restarted=restarted,
            task_id=self._state.task_id,
        )

    def _run_tests(self, obs: CodeObservation) -> None:
        assert self._task is not None
        cases = self._task.cases
        obs.tests_total = len(cases)
        if not self._clean_cells:
            obs.test_results = [
                TestResult(name=f"case {i}", passed=False, error="no code has run cleanly yet")
                for i in range(len(cases))
            ]
            return
        results = self._executor.judge(
            "\n\n".join(self._clean_cells),
            [case.call for case in cases],
            timeout_s=self._executor.timeout_s,
        )
        for i, (case, got) in enumerate(zip(cases, results, strict=True)):
            passed = not got.error and same_value(got.value, case.expected)
            error = got.error or ("" if passed else "wrong result")
            obs.test_results.append(TestResult(name=f"case {i}", passed=passed, error=error))
        obs.tests_passed = sum(r.passed for r in obs.test_results)
        self._state.best_tests_passed = max(self._state.best_tests_passed, obs.tests_passed)

    @property
    def state(self) -> CodeState:
        return self._state

    def close(self) -> None:
        self._executor.close()
        self._box.close()
