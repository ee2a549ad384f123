"""Typed models of the math environment."""

from __future__ import annotations

from openenv.core.env_server.types import Action, Observation, State


class MathAction(Action):
    """The agent's answer, as text (the format rubric checks it is an integer)."""

    answer: str


class MathObservation(Observation):
    question: str = ""
    feedback: str = ""


class MathState(State):
    seed: int | None = None
    correct: int = 0
    questions: int = 3
