"""The Gymnasium environment: the checker, and real episodes over the wire."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gymnasium_env import GymnasiumAction, GymnasiumEnv
from gymnasium_env.server.gymnasium_environment import GymnasiumEnvironment
from openenv.core.errors import InvalidRequestError
from openenv.testing import check_env, running_server

APP = "gymnasium_env.server.app:app"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server(APP) as url:
        yield url


@pytest.fixture(scope="module")
def pendulum_server() -> Iterator[str]:
    env = {"GYMNASIUM_ENV_ID": "Pendulum-v1", "GYMNASIUM_ENV_KWARGS": json.dumps({"g": 9.81})}
    with running_server(APP, env=env) as url:
        yield url


def test_passes_the_environment_checker() -> None:
    samples = [GymnasiumAction(action=0)]  # CartPole falls over quickly: covers step-after-done
    report = check_env(GymnasiumEnvironment, sample_actions=samples, steps=100)
    assert report.ok, str(report)
    assert "step_after_done" in str(report)


def test_passes_the_environment_checker_with_a_continuous_env() -> None:
    samples = [GymnasiumAction(action=[1.5]), GymnasiumAction(action=[-0.5])]
    report = check_env(lambda: GymnasiumEnvironment("Pendulum-v1"), sample_actions=samples)
    assert report.ok, str(report)


async def test_cartpole_episode_over_the_wire(server: str) -> None:
    async with GymnasiumEnv(base_url=server) as env:
        result = await env.reset(seed=42)
        obs = result.observation
        assert obs.env_id == "CartPole-v1"
        assert obs.action_space == {"type": "Discrete", "n": 2, "start": 0}
        assert obs.observation_space["type"] == "Box"
        assert obs.observation_space["shape"] == [4]
        assert len(obs.observation) == 4 and all(isinstance(x, float) for x in obs.observation)
        assert not result.done and result.reward is None
        first = obs.observation

        steps, total = 0, 0.0
        while not result.done:
            result = await env.step(GymnasiumAction(action=steps % 2 if steps < 4 else 1))
            steps += 1
            total += result.reward
            assert result.reward == 1.0
        assert result.observation.terminated and not result.observation.truncated
        state = await env.state()
        assert state.step_count == steps
        assert state.episode_return == pytest.approx(total)
        assert state.terminated and state.seed == 42

        # The same seed gives the same episode.
        again = await env.reset(seed=42)
        assert again.observation.observation == first
        for n in range(steps):
            replay = await env.step(GymnasiumAction(action=n % 2 if n < 4 else 1))
        assert replay.done and replay.observation.observation == result.observation.observation


async def test_invalid_actions_are_validation_errors(server: str) -> None:
    async with GymnasiumEnv(base_url=server) as env:
        await env.reset(seed=0)
        with pytest.raises(InvalidRequestError) as info:
            await env.step(GymnasiumAction(action=2))
        assert info.value.code == "VALIDATION_ERROR"
        assert "action" in info.value.message and "out of range" in info.value.message
        assert info.value.data["errors"][0]["loc"] == ["action"]
        with pytest.raises(InvalidRequestError):
            await env.step(GymnasiumAction(action=[0.5]))
        # The episode goes on after a rejected action.
        ok = await env.step(GymnasiumAction(action=1))
        assert ok.reward == 1.0
        assert (await env.state()).step_count == 1


async def test_frozen_lake_per_episode_with_discrete_observations(server: str) -> None:
    async with GymnasiumEnv(base_url=server) as env:
        result = await env.reset(
            env_id="FrozenLake-v1", env_kwargs={"is_slippery": False, "map_name": "4x4"}, seed=0
        )
        assert result.observation.env_id == "FrozenLake-v1"
        assert result.observation.observation == 0
        assert result.observation.observation_space == {"type": "Discrete", "n": 16, "start": 0}
        assert result.observation.action_space["n"] == 4
        # LEFT=0 DOWN=1 RIGHT=2 UP=3; on the standard 4x4 map this path reaches the goal.
        path = [1, 1, 2, 2, 1, 2]
        rewards = []
        for move in path:
            result = await env.step(GymnasiumAction(action=move))
            rewards.append(result.reward)
        assert result.done and result.observation.terminated
        assert result.observation.observation == 15
        assert rewards == [0.0] * 5 + [1.0]
        state = await env.state()
        assert state.env_id == "FrozenLake-v1" and state.episode_return == 1.0

        # Falling in a hole ends the episode with reward 0; state 5 is a hole.
        result = await env.reset(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False})
        result = await env.step(GymnasiumAction(action=1))
        result = await env.step(GymnasiumAction(action=2))
        assert result.done and result.reward == 0.0 and result.observation.observation == 5

        # Back to the server's default id.
        back = await env.reset(seed=1)
        assert back.observation.env_id == "CartPole-v1"


async def test_unknown_env_id_is_rejected(server: str) -> None:
    async with GymnasiumEnv(base_url=server) as env:
        with pytest.raises(Exception, match="not a registered"):
            await env.reset(env_id="NoSuchEnv-v0")
        with pytest.raises(Exception, match="module-qualified"):
            await env.reset(env_id="os:System-v0")


async def test_pendulum_continuous_actions(pendulum_server: str) -> None:
    async with GymnasiumEnv(base_url=pendulum_server) as env:
        result = await env.reset(seed=7)
        obs = result.observation
        assert obs.env_id == "Pendulum-v1"
        assert obs.action_space == {
            "type": "Box",
            "shape": [1],
            "dtype": "float32",
            "low": -2.0,
            "high": 2.0,
        }
        first = obs.observation
        rewards = []
        while not result.done:
            result = await env.step(GymnasiumAction(action=[0.5]))
            rewards.append(result.reward)
            assert result.reward <= 0.0  # Pendulum's reward is a negative cost
        assert len(rewards) == 200  # TimeLimit of Pendulum-v1
        assert result.observation.truncated and not result.observation.terminated
        state = await env.state()
        assert state.env_kwargs == {"g": 9.81}
        assert state.episode_return == pytest.approx(sum(rewards))

        again = await env.reset(seed=7)
        assert again.observation.observation == first
        with pytest.raises(InvalidRequestError) as info:
            await env.step(GymnasiumAction(action=[3.0]))
        assert info.value.data["errors"][0]["loc"] == ["action", "0"]
        assert "out of bounds" in info.value.message
        scalar = await env.step(GymnasiumAction(action=-1.0))  # a scalar for shape (1,)
        assert scalar.reward <= 0.0


def test_space_conversions_of_composite_spaces() -> None:
    import numpy as np
    from gymnasium import spaces

    from gymnasium_env.spaces import SpaceValueError, describe_space, from_jsonable, to_jsonable

    space = spaces.Dict(
        {
            "move": spaces.Discrete(3, start=-1),
            "keys": spaces.MultiBinary(4),
            "dials": spaces.MultiDiscrete([2, 5]),
            "pair": spaces.Tuple((spaces.Discrete(2), spaces.Box(0, 1, (2, 2)))),
        }
    )
    value = {"move": -1, "keys": [0, 1, 1, 0], "dials": [1, 4], "pair": [1, [[0, 1], [0.5, 0]]]}
    native = from_jsonable(space, value)
    assert space.contains(native)
    assert to_jsonable(space, native) == value
    assert describe_space(space)["spaces"]["pair"]["spaces"][1]["shape"] == [2, 2]
    sample = space.sample()
    assert json.loads(json.dumps(to_jsonable(space, sample)))
    with pytest.raises(SpaceValueError, match=r"action\.pair\[1\]\[1\]\[0\]"):
        from_jsonable(space, {**value, "pair": [1, [[0, 1], [2, 0]]]})
    with pytest.raises(SpaceValueError, match=r"action\.dials"):
        from_jsonable(space, {**value, "dials": [2, 0]})
    with pytest.raises(SpaceValueError, match="missing keys"):
        from_jsonable(space, {"move": 0})
    assert np.asarray(from_jsonable(spaces.Box(-1, 1, (1,)), 0.5)).shape == (1,)
