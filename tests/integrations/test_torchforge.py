"""torchforge adapter. torchforge cannot be installed here (PyPI's `torchforge` 0.0.1 is an
empty placeholder; the real package needs Monarch and vLLM on GPUs), so it is tested against
torchforge's published interface: `TorchforgeRolloutEnv` below is a FAITHFUL COPY OF THE
METHOD SIGNATURES its rollout loops use (apps/blackjack: `reset() -> str`, `step(text) ->
EnvStepResult(observation, reward, done, metadata)`, `close()`), and `FakeCompletion` copies
the one field of `forge.data_models.completion.Completion` the loop reads (`text`). The
environment is real: a served math environment, real WebSocket frames."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import pytest

from openenv.integrations._episodes import EnvironmentInfrastructureError, ServedEnv
from openenv.integrations.torchforge import EnvStepResult, ForgeTextEnv, play_episode

from .conftest import kill, solve


@runtime_checkable
class TorchforgeRolloutEnv(Protocol):
    """Copy of the interface torchforge's rollout loops call (not torchforge's code)."""

    def reset(self) -> str: ...

    def step(self, action_text: str) -> Any: ...

    def close(self) -> None: ...


@dataclass
class FakeCompletion:
    """The field of torchforge's `Completion` the loop reads; a stand-in for its Generator."""

    text: str


async def generator_route(messages: list[dict[str, str]]) -> list[FakeCompletion]:
    """Stands in for `Generator.generate.route`: a list of completions, here always right."""
    return [FakeCompletion(text=solve(messages[-1]["content"]))]


def test_matches_torchforges_env_interface(math_url: str) -> None:
    env = ForgeTextEnv(math_url, seed=3)
    try:
        assert isinstance(env, TorchforgeRolloutEnv)
        first = env.reset()
        assert "What is" in first
        result = env.step(solve(first))
        assert isinstance(result, EnvStepResult)
        assert result.reward == 1.0 and result.done is False
        assert result.observation["role"] == "user" and "What is" in result.observation["content"]
    finally:
        env.close()


async def test_play_episode_with_a_generator(math_url: str) -> None:
    env = ForgeTextEnv(math_url)
    try:
        episode = await play_episode(env, generator_route, seed=11)
        assert episode.done
        assert episode.rewards == [1.0, 1.0, 1.0]
        assert episode.total_reward == 3.0
        assert all(isinstance(c, list) for c in episode.completions)
        # A fresh reset is a fresh episode with its own questions.
        again = await play_episode(env, lambda messages: "-1", seed=12)
        assert again.done and again.rewards == [0.2, 0.2, 0.2]
    finally:
        env.close()


@pytest.mark.slow  # a server process of its own, and the client's reconnect attempts
async def test_env_killed_mid_episode_is_an_infrastructure_error(doomed_server) -> None:
    env = ForgeTextEnv(doomed_server.url, seed=2)
    calls = 0

    async def generate(messages: list[dict[str, str]]) -> str:
        nonlocal calls
        calls += 1
        if calls == 2:
            kill(doomed_server)
        return solve(messages[-1]["content"])

    try:
        with pytest.raises(EnvironmentInfrastructureError) as caught:
            await play_episode(env, generate)
        assert caught.value.category == "infrastructure"
        assert calls == 2
    finally:
        env.close()


@pytest.mark.slow  # starts the environment's server process
async def test_environment_started_by_from_env() -> None:
    env = ForgeTextEnv(ServedEnv.from_env("math"))
    try:
        episode = await play_episode(env, generator_route, seed=4)
        assert episode.rewards == [1.0, 1.0, 1.0]
    finally:
        env.close()
        env.served.close()
