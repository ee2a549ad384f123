"""Arithmetic questions; the reward comes entirely from `MathRubric` (no reward code here)."""

from __future__ import annotations

import random
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Environment

from ..models import MathAction, MathObservation, MathState
from ..rubrics import MathRubric


class MathEnvironment(Environment[MathAction, MathObservation, MathState]):
    """Each episode asks `questions` additions; `reset(seed=...)` fixes them."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUNS_ON_EVENT_LOOP = True  # reset/step are a few microseconds of arithmetic

    def __init__(self, questions: int = 3) -> None:
        super().__init__(rubric=MathRubric())
        self._questions = questions
        self._state = MathState(questions=questions)
        self._pairs: list[tuple[int, int]] = []

    def _observe(self, feedback: str = "", done: bool = False) -> MathObservation:
        index = self._state.step_count
        if done or index >= len(self._pairs):
            return MathObservation(feedback=feedback, done=True)
        a, b = self._pairs[index]
        return MathObservation(question=f"What is {a} + {b}?", feedback=feedback)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> MathObservation:
        rng = random.Random(seed)
        self._pairs = [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(self._questions)]
        self._state = MathState(
            episode_id=episode_id or str(uuid4()), seed=seed, questions=self._questions
        )
        return self._observe()

    def step(self, action: MathAction, timeout_s: float | None = None, **kwargs: Any):
        if self._state.step_count >= len(self._pairs):
            raise ValueError("The episode is over: call reset()")
        a, b = self._pairs[self._state.step_count]
        right = action.answer.strip() == str(a + b)
        self._state.step_count += 1
        self._state.correct += int(right)
        done = self._state.step_count >= len(self._pairs)
        # The rubric scores (action, this observation): it carries the answered question's result.
        return MathObservation(
            question="" if done else self._observe().question,
            feedback="correct" if right else f"wrong: {a} + {b} = {a + b}",
            done=done,
            metadata={"expected": a + b},
        )

    @property
    def state(self) -> MathState:
        return self._state
