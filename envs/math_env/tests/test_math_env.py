"""The math environment over the wire: rewards from its rubric, their parts, trajectory rewards."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from math_env import MathAction, MathEnv
from math_env.server.math_environment import MathEnvironment
from openenv.testing import check_env, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("math_env.server.app:app") as url:
        yield url


def _answer(question: str) -> int:
    a, b = question.removeprefix("What is ").removesuffix("?").split(" + ")
    return int(a) + int(b)


def test_passes_the_environment_checker() -> None:
    samples = [MathAction(answer=str(n)) for n in range(5)]
    report = check_env(MathEnvironment, sample_actions=samples)
    assert report.ok, str(report)


async def test_rewards_and_their_parts_reach_the_client(server: str) -> None:
    async with MathEnv(base_url=server) as env:
        result = await env.reset(seed=3)
        first = result.observation.question
        right = await env.step(MathAction(answer=str(_answer(first))))
        assert right.reward == pytest.approx(1.0)
        assert right.metadata["reward_components"]["format"] == 1.0
        assert right.metadata["reward_components"]["correct"] == 1.0
        wrong_format = await env.step(MathAction(answer="many"))
        assert wrong_format.reward == 0.0
        assert wrong_format.metadata["reward_components"]["format"] == 0.0
        last = await env.step(
            MathAction(answer=str(_answer(wrong_format.observation.question) + 1))
        )
        assert last.done
        assert last.reward == pytest.approx(0.2)
        assert last.metadata["reward_components"] == {
            "format": 1.0,
            "correct": 0.0,
            "correct.rubric": 0.0,
            "episode": pytest.approx(1 / 3),
        }
        final = 1 / 3
        assert last.metadata["step_rewards"]["episode"] == pytest.approx(
            [final * 0.9**2, final * 0.9, final]
        )
        # The rubric starts over with the episode.
        again = await env.reset(seed=3)
        assert again.observation.question == first
        nxt = await env.step(MathAction(answer=str(_answer(first))))
        assert "step_rewards" not in nxt.metadata
        assert math.isclose(nxt.reward, 1.0)
