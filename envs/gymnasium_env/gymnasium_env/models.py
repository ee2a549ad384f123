"""Typed models of the Gymnasium environment.

Spaces map to JSON values: `Discrete` -> int, `Box` -> nested lists of floats (or ints for an
integer dtype) of the space's shape, `MultiBinary` / `MultiDiscrete` -> (nested) lists of ints,
`Dict` -> dict, `Tuple` -> list, `Text` -> str, recursively.
"""

from __future__ import annotations

from typing import Any, Union

from pydantic import ConfigDict, Field

from openenv.core.env_server.types import Action, Observation, State

#: A value of a Gymnasium space, as JSON.
SpaceValue = Union[int, float, str, list[Any], dict[str, Any]]


class GymnasiumAction(Action):
    """One action of the served environment's action space, e.g. `1` for `Discrete(2)` or
    `[0.5]` for a 1-D `Box`. Checked against the space; an invalid one is a validation error."""

    # Legal sample actions for the checkers: the default CartPole-v1 (docs/testing.md).
    model_config = ConfigDict(json_schema_extra={"examples": [{"action": 0}, {"action": 1}]})

    action: SpaceValue


class GymnasiumObservation(Observation):
    """`observation` is a value of the observation space; `done = terminated or truncated`."""

    observation: Any = None
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = Field(default_factory=dict)
    env_id: str = ""
    #: JSON descriptions of the spaces (see `gymnasium_env.spaces.describe_space`).
    action_space: dict[str, Any] = Field(default_factory=dict)
    observation_space: dict[str, Any] = Field(default_factory=dict)


class GymnasiumState(State):
    env_id: str = ""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None
    episode_return: float = 0.0
    terminated: bool = False
    truncated: bool = False
