"""The grid world over the wire: rewards, done, clamped moves, seeded random starts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grid_world_env import GridWorldAction, GridWorldEnv
from grid_world_env.server.grid_world_environment import GridWorldEnvironment
from openenv.testing import check_env, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("grid_world_env.server.app:app") as url:
        yield url


def test_passes_the_environment_checker() -> None:
    samples = [GridWorldAction(direction=d) for d in ("RIGHT", "DOWN")]
    report = check_env(GridWorldEnvironment, sample_actions=samples)
    assert report.ok, str(report)


def test_passes_the_environment_checker_with_generated_actions() -> None:
    report = check_env(GridWorldEnvironment)
    assert report.ok, str(report)


async def test_shortest_path_episode(server: str) -> None:
    async with GridWorldEnv(base_url=server) as env:
        result = await env.reset(seed=0)
        assert result.observation.position == [0, 0]
        assert result.observation.goal == [4, 4]
        assert not result.done
        moves = ["RIGHT"] * 4 + ["DOWN"] * 4
        rewards = []
        for i, move in enumerate(moves):
            result = await env.step(GridWorldAction(direction=move))
            rewards.append(result.reward)
            assert result.done == (i == len(moves) - 1)
        assert result.observation.position == [4, 4]
        assert rewards[:-1] == pytest.approx([-0.1] * 7)
        assert rewards[-1] == pytest.approx(1.0)
        state = await env.state()
        assert state.step_count == 8
        assert state.reached_goal
        assert state.total_reward == pytest.approx(1.0 - 0.7)


async def test_moves_are_clamped_at_the_border(server: str) -> None:
    async with GridWorldEnv(base_url=server) as env:
        await env.reset()
        result = await env.step(GridWorldAction(direction="UP"))
        assert result.observation.position == [0, 0]
        assert result.observation.bumped
        assert result.reward == pytest.approx(-0.1)
        result = await env.step(GridWorldAction(direction="LEFT"))
        assert result.observation.position == [0, 0]
        result = await env.step(GridWorldAction(direction="DOWN"))
        assert result.observation.position == [1, 0]
        assert not result.observation.bumped
        assert (await env.state()).step_count == 3


async def test_random_start_is_seeded(server: str) -> None:
    async with GridWorldEnv(base_url=server) as env:
        starts = []
        for seed in range(6):
            result = await env.reset(seed=seed, random_start=True)
            starts.append(tuple(result.observation.position))
            assert result.observation.position != [4, 4]
        again = await env.reset(seed=3, random_start=True)
        assert tuple(again.observation.position) == starts[3]
        assert len(set(starts)) > 1
        assert (await env.state()).random_start


async def test_episode_is_cut_at_max_steps(server: str) -> None:
    async with GridWorldEnv(base_url=server) as env:
        await env.reset(max_steps=3)
        for _ in range(3):
            result = await env.step(GridWorldAction(direction="UP"))
        assert result.done
        assert not (await env.state()).reached_goal


def test_rejects_unknown_directions() -> None:
    with pytest.raises(ValueError):
        GridWorldAction(direction="NORTH")  # type: ignore[arg-type]
