"""The math environment's reward: a composed rubric.

    MathRubric
    ├── format   1.0 if the answer parses as an integer
    ├── correct  1.0 if it equals the expected answer (0 when the format is wrong)
    └── episode  trajectory rubric: fraction of correct answers, discounted back over the steps

step reward = 0.2 * format + 0.8 * correct
"""

from __future__ import annotations

from typing import Any

from openenv.core.rubrics import ExponentialDiscountingTrajectoryRubric, Gate, Rubric


def _parse(answer: str) -> int | None:
    try:
        return int(answer.strip())
    except ValueError:
        return None


class IsInteger(Rubric):
    def forward(self, action: Any, observation: Any) -> float:
        return 1.0 if _parse(action.answer) is not None else 0.0


class MatchesExpected(Rubric):
    def forward(self, action: Any, observation: Any) -> float:
        return 1.0 if _parse(action.answer) == observation.metadata.get("expected") else 0.0


class FractionCorrect(ExponentialDiscountingTrajectoryRubric):
    def score_trajectory(self, trajectory: list[Any]) -> float:
        hits = [o.metadata.get("expected") == _parse(a.answer) for a, o in trajectory]
        return sum(hits) / len(hits) if hits else 0.0


class MathRubric(Rubric):
    def __init__(self, gamma: float = 0.9) -> None:
        super().__init__()
        self.format = IsInteger()
        self.correct = Gate(MatchesExpected(), threshold=1.0)
        self.episode = FractionCorrect(gamma=gamma)

    def forward(self, action: Any, observation: Any) -> float:
        fmt = self.format(action, observation)
        correct = self.correct(action, observation) if fmt else 0.0
        self.episode(action, observation)
        return 0.2 * fmt + 0.8 * correct
