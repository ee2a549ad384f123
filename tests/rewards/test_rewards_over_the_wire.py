"""Rubric rewards as a trainer sees them: through a real server and the client."""

from __future__ import annotations

import pytest

from openenv.core import GenericEnvClient, RewardError
from openenv.core.errors import is_infrastructure_error
from tests.support.server import serve


async def test_async_rubric_scores_a_sync_step_with_components() -> None:
    with serve("apps.rubric_envs:app") as server:
        async with GenericEnvClient(base_url=server.url) as env:
            await env.reset()
            result = await env.step({"text": "please go"})
            assert result.reward == pytest.approx(0.5 * 0.9 + 0.5 * 1.0)
            assert result.metadata["reward_components"] == {
                "length": pytest.approx(0.9),
                "polite": 1.0,
            }
            rude = await env.step({"text": "go"})
            assert rude.reward == pytest.approx(0.5 * 0.2)
            assert rude.metadata["reward_components"]["polite"] == 0.0


async def test_a_failing_rubric_is_a_typed_error_never_a_zero_reward() -> None:
    with serve("apps.rubric_envs:exploding_app") as server:
        async with GenericEnvClient(base_url=server.url) as env:
            await env.reset()
            with pytest.raises(RewardError) as info:
                await env.step({"text": "please"})
            assert info.value.code == "REWARD_ERROR"
            assert info.value.category == "environment"
            assert info.value.data["rubric_path"] == "boom"
            assert info.value.data["exception"] == "ZeroDivisionError"  # the rubric's own error
            assert "divided by zero" in info.value.message
            # The session goes on.
            assert (await env.state())["step_count"] == 1


async def test_an_unreachable_judge_is_an_infrastructure_failure() -> None:
    with serve("apps.rubric_envs:judge_app") as server:
        async with GenericEnvClient(base_url=server.url) as env:
            await env.reset()
            with pytest.raises(RewardError) as info:
                await env.step({"text": "please"})
            assert info.value.category == "infrastructure"
            assert info.value.data["exception"] == "LLMUnavailableError"
            assert is_infrastructure_error(info.value)
