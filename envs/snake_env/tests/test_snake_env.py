"""Snake over the wire: fruit, death, time penalty, relative and absolute turns, seeded fruit."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import pytest

from openenv.testing import check_env, running_server
from snake_env import SnakeAction, SnakeEnv, SnakeObservation
from snake_env.server.snake_environment import DELTAS, SnakeEnvironment


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("snake_env.server.app:app") as url:
        yield url


def test_passes_the_environment_checker() -> None:
    samples = [SnakeAction(action=a) for a in (0, 1, 2, 0)] + [SnakeAction(direction="DOWN")]
    report = check_env(SnakeEnvironment, sample_actions=samples, steps=30)
    assert report.ok, str(report)


def test_passes_the_environment_checker_with_generated_actions() -> None:
    report = check_env(SnakeEnvironment)
    assert report.ok, str(report)


def _greedy(obs: SnakeObservation) -> str:
    """A safe direction toward the fruit (avoiding walls and the body, tail excepted)."""
    body = {(r, c) for r, row in enumerate(obs.board) for c, ch in enumerate(row) if ch in "Ho#"}
    head = tuple(obs.head)
    best, best_distance = obs.direction, None
    for name, (dr, dc) in DELTAS.items():
        r, c = head[0] + dr, head[1] + dc
        if not (0 <= r < obs.height and 0 <= c < obs.width) or (r, c) in body:
            continue
        distance = abs(r - obs.fruit[0]) + abs(c - obs.fruit[1])
        if best_distance is None or distance < best_distance:
            best, best_distance = name, distance
    return best


async def test_eating_fruit(server: str) -> None:
    async with SnakeEnv(base_url=server) as env:
        result = await env.reset(seed=5)
        obs = result.observation
        assert obs.length == 3 and obs.score == 0 and obs.direction == "RIGHT"
        assert len(obs.grid) == 20 and all(len(row) == 20 for row in obs.grid)
        assert "".join(obs.board).count("*") == 1 and "".join(obs.board).count("H") == 1
        assert obs.board[0] == "#" * 20 and obs.grid[0] == [2] * 20  # the wall
        assert result.reward == 0.0 and obs.alive
        for _ in range(200):
            before = result.observation
            result = await env.step(SnakeAction(direction=_greedy(before)))
            obs = result.observation
            if obs.score > before.score:
                assert result.reward == pytest.approx(1.001)  # fruit + time alive
                assert obs.event == "fruit" and obs.length == before.length + 1
                assert obs.episode_fruits == obs.score
            else:
                assert result.reward == pytest.approx(0.001)
                assert obs.length == before.length
            assert obs.episode_steps == before.episode_steps + 1
            if obs.score >= 4 or result.done:
                break
        assert obs.score >= 4 and not result.done
        state = await env.state()
        assert state.score == obs.score and state.alive
        assert len(state.snake) == obs.length and state.snake[0] == obs.head


async def test_hitting_the_wall_ends_the_episode(server: str) -> None:
    async with SnakeEnv(base_url=server) as env:
        result = await env.reset(seed=0, width=12, height=12)
        assert result.observation.head == [6, 6]
        rewards = []
        while not result.done:
            result = await env.step(SnakeAction(action=0))
            rewards.append(result.reward)
        # From (6, 6) heading right: four moves to column 10, then the wall in column 11.
        assert len(rewards) == 5 and rewards[-1] == pytest.approx(-1.0)
        assert all(r == pytest.approx(0.001) or r == pytest.approx(1.001) for r in rewards[:-1])
        assert result.observation.event == "death" and not result.observation.alive
        assert result.observation.episode_score == pytest.approx(sum(rewards))
        state = await env.state()
        assert not state.alive


async def test_turns(server: str) -> None:
    async with SnakeEnv(base_url=server) as env:
        await env.reset(seed=1)
        left = await env.step(SnakeAction(action=1))
        assert left.observation.direction == "UP"
        right = await env.step(SnakeAction(action=2))
        assert right.observation.direction == "RIGHT"
        right = await env.step(SnakeAction(action=2))
        assert right.observation.direction == "DOWN"
        reverse = await env.step(SnakeAction(direction="UP"))  # would turn back: ignored
        assert reverse.observation.direction == "DOWN"
        absolute = await env.step(SnakeAction(direction="LEFT"))
        assert absolute.observation.direction == "LEFT"


async def test_fruit_placement_is_seeded(server: str) -> None:
    async with SnakeEnv(base_url=server) as env:
        fruits = [(await env.reset(seed=s)).observation.fruit for s in (1, 2, 3, 1)]
        assert fruits[0] == fruits[3]
        assert len({tuple(f) for f in fruits}) > 1
        small = await env.reset(seed=1, width=6, height=4)
        assert len(small.observation.grid) == 4 and len(small.observation.grid[0]) == 6
        assert len(small.observation.observation[0][0]) == 8


def test_biting_itself_ends_the_episode() -> None:
    env = SnakeEnvironment()
    env.reset(seed=0)
    # A length-5 snake curled so that turning down bites its own body.
    env._body = deque([(5, 5), (5, 4), (6, 4), (6, 5), (6, 6)])
    env._occupied = set(env._body)
    env._state.fruit = [0, 0]
    obs = env.step(SnakeAction(direction="DOWN"))
    assert obs.done and obs.reward == -1.0 and obs.event == "death"


def test_following_the_tail_is_allowed() -> None:
    env = SnakeEnvironment()
    env.reset(seed=0)
    env._body = deque([(5, 5), (5, 4), (6, 4), (6, 5)])
    env._occupied = set(env._body)
    env._state.fruit = [0, 0]
    obs = env.step(SnakeAction(direction="DOWN"))
    assert not obs.done and obs.head == [6, 5]
