"""Typed models of the reasoning gym environment.

OpenEnv's `reasoning_gym_env` field names (`answer`; `question`, `score`, `correct_answer`,
`dataset_metadata`), and a state that says which dataset, seed and position the session is at.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from openenv.core.env_server.types import Action, Observation, State


class ReasoningGymAction(Action):
    """The agent's answer to the current question, as text."""

    # Sample actions for the checkers (docs/testing.md): the right answer to the first question
    # of the default dataset after reset(seed=0), then a wrong one. Any text is a legal answer.
    model_config = ConfigDict(json_schema_extra={"examples": [{"answer": "500"}, {"answer": "0"}]})

    answer: str = Field(description="The answer (with `answer_tag` set, only the tagged part)")


class ReasoningGymObservation(Observation):
    #: the question to answer (after reset; None once answered)
    question: str | None = None
    #: the dataset verifier's score of the answer, 0.0 to 1.0 (after step)
    score: float | None = None
    #: the reference answer, revealed only after the step (None where the dataset accepts many)
    correct_answer: str | None = None
    #: the dataset entry's metadata, revealed only after the step (it can contain the solution)
    dataset_metadata: dict[str, Any] | None = None


class ReasoningGymState(State):
    #: the dataset questions come from (`composite` for a weighted mix)
    dataset_name: str | None = None
    seed: int | None = None
    size: int | None = None
    #: position of the current question in the dataset (questions wrap around after `size`)
    index: int | None = None
    #: the tag an answer must be wrapped in (`answer` for `<answer>...</answer>`), or None
    answer_tag: str | None = None
    #: True once the current question has been answered
    answered: bool = False
