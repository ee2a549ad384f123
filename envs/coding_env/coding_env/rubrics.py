"""The coding environment's reward: a composed rubric.

    CodingRubric
    ├── tests  fraction of the task's hidden tests passed (task episodes only)
    └── runs   1.0 if the step's code ran to its end without an exception or a limit

step reward = 0.9 * tests + 0.1 * runs with a task; = runs when free-form.
`metadata["reward_components"]` carries each part.
"""

from __future__ import annotations

from typing import Any

from openenv.core.rubrics import Rubric
from openenv.sandbox import ExecStatus


class TestsPassed(Rubric):
    __test__ = False  # not a pytest class

    def forward(self, action: Any, observation: Any) -> float:
        total = observation.tests_total
        return observation.tests_passed / total if total else 0.0


class RunsCleanly(Rubric):
    def forward(self, action: Any, observation: Any) -> float:
        return 1.0 if observation.status == ExecStatus.OK else 0.0


class CodingRubric(Rubric):
    def __init__(self, tests_weight: float = 0.9) -> None:
        super().__init__()
        self.tests_weight = tests_weight
        self.tests = TestsPassed()
        self.runs = RunsCleanly()

    def forward(self, action: Any, observation: Any) -> float:
        runs = self.runs(action, observation)
        if observation.task_id is None:
            return runs
        tests = self.tests(action, observation)
        return self.tests_weight * tests + (1 - self.tests_weight) * runs
