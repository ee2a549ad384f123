"""Wire models, serialization and configuration."""

from __future__ import annotations

import enum
from typing import Any, Optional

import pytest

from openenv.core.env_server import (
    Action,
    CallToolAction,
    Environment,
    ListToolsAction,
    Observation,
    ServerConfig,
    State,
    deserialize_action,
    serialize_observation,
)
from openenv.core.env_server.interfaces import state_class_of
from openenv.core.protocol import dumps


class Color(enum.Enum):
    RED = "red"


class BoardObservation(Observation):
    board: list[list[int]]
    color: Color = Color.RED


class BoardState(State):
    turn: int = 0


class Board(Environment[Action, BoardObservation, BoardState]):
    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kw):
        raise NotImplementedError

    def step(self, action, timeout_s=None, **kw):
        raise NotImplementedError

    @property
    def state(self) -> BoardState:
        return BoardState()


class Annotated(Board.__mro__[1]):  # type: ignore[misc]  # plain Environment subclass
    def reset(self, seed=None, episode_id=None, **kw):
        raise NotImplementedError

    def step(self, action, timeout_s=None, **kw):
        raise NotImplementedError

    @property
    def state(self) -> BoardState:
        return BoardState()


@pytest.mark.parametrize("reward", [True, 3, 0.5, None])
def test_serialized_observation_keeps_reward_type_and_metadata(reward) -> None:
    obs = BoardObservation(board=[[1]], reward=reward, done=True, metadata={"k": 1})
    payload = serialize_observation(obs)
    assert payload["observation"] == {"board": [[1]], "color": Color.RED, "metadata": {"k": 1}}
    assert payload["reward"] is reward if reward is not None else payload["reward"] is None
    assert payload["metadata"] == {"k": 1}
    assert b'"color":"red"' in dumps(payload)


def test_mcp_actions_are_routed_by_type() -> None:
    assert isinstance(deserialize_action({"type": "list_tools"}, CallToolAction), ListToolsAction)
    action = deserialize_action({"type": "call_tool", "tool_name": "t", "arguments": {}}, Action)
    assert isinstance(action, CallToolAction)


def test_actions_reject_unknown_fields() -> None:
    with pytest.raises(ValueError):
        deserialize_action({"tool_name": "x", "bogus": 1}, CallToolAction)


def test_state_class_is_found_without_instantiating() -> None:
    assert state_class_of(Board) is BoardState
    assert state_class_of(Annotated) is BoardState
    assert state_class_of(lambda: None) is State


def test_state_keeps_extra_fields() -> None:
    assert State(episode_id="e", extra=1).model_dump() == {
        "episode_id": "e",
        "step_count": 0,
        "extra": 1,
    }


def test_config_arguments_win_over_environment(monkeypatch) -> None:
    monkeypatch.setenv("MAX_CONCURRENT_ENVS", "7")
    monkeypatch.setenv("OPENENV_SESSION_TIMEOUT", "0")
    assert ServerConfig.from_env().max_concurrent_envs == 7
    assert ServerConfig.from_env().session_timeout is None
    assert ServerConfig.from_env(max_concurrent_envs=3).max_concurrent_envs == 3
    monkeypatch.setenv("MAX_CONCURRENT_ENVS", "lots")
    with pytest.raises(ValueError, match="MAX_CONCURRENT_ENVS"):
        ServerConfig.from_env()
    monkeypatch.delenv("MAX_CONCURRENT_ENVS")
    with pytest.raises(TypeError):
        ServerConfig.from_env(unknown_option=1)


class _Upper(Action):
    """An action whose own `model_validate` rewrites its input first."""

    word: str

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> _Upper:  # type: ignore[override]
        return super().model_validate({**obj, "word": obj["word"].upper()}, **kwargs)


class _Redacted(Observation):
    """An observation whose own `model_dump` hides a field."""

    secret: str = "s"

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return {k: v for k, v in super().model_dump(**kwargs).items() if k != "secret"}


def test_own_model_validate_and_model_dump_are_honoured() -> None:
    """The server calls pydantic's validator and serializer directly only for classes that
    keep pydantic's `model_validate` / `model_dump`."""
    assert deserialize_action({"word": "hi"}, _Upper).word == "HI"
    assert deserialize_action({"word": "hi"}, _Upper).word == "HI"  # (cached)
    assert "secret" not in serialize_observation(_Redacted())["observation"]
    with pytest.raises(ValueError):
        deserialize_action({"word": "hi", "extra": 1}, _Upper)
