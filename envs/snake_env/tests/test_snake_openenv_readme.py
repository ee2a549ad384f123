"""OpenEnv's `snake_env` README code, run against this package's served environment, and the
OpenEnv-compatible encoding (cell codes, observation channels, observers, rewards).

The README imports `from envs.snake_env import ...` (a path inside OpenEnv's repository); the
package here is `snake_env`. Its client is async, so the blocking calls go through `.sync()`."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator

import pytest

from openenv.core.errors import InvalidActionError
from openenv.testing import running_server
from snake_env import SnakeAction
from snake_env.server.snake_environment import SnakeEnvironment


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("snake_env.server.app:app") as url:
        yield url


def test_quick_start(server: str) -> None:
    from snake_env import SnakeAction, SnakeEnv  # OpenEnv: from envs.snake_env import ...

    client = SnakeEnv(base_url=server).sync()
    result = client.reset()
    assert result.observation.alive is True
    assert (len(result.observation.grid), len(result.observation.grid[0])) == (20, 20)
    result = client.step(SnakeAction(action=0))  # Continue straight
    assert result.reward == pytest.approx(0.001)
    assert result.observation.episode_score == pytest.approx(0.001)
    result = client.step(SnakeAction(action=1))  # Turn left
    result = client.step(SnakeAction(action=2))  # Turn right
    assert result.observation.direction == "RIGHT"
    state = client.state()
    assert state.episode_id and state.step_count == 3
    client.close()


def test_example_training_loop(server: str) -> None:
    from snake_env import SnakeAction, SnakeEnv

    rng = random.Random(0)
    env = SnakeEnv(base_url=server).sync()
    for _episode in range(3):
        result = env.reset()
        total_reward = 0
        done = False
        while not done:
            action = SnakeAction(action=rng.randint(0, 2))
            result = env.step(action)
            total_reward += result.reward
            done = result.done
        obs = result.observation
        assert obs.episode_steps == env.state().step_count and obs.episode_kills == 0
        assert obs.episode_score == pytest.approx(total_reward)
        assert total_reward == pytest.approx(
            0.001 * (obs.episode_steps - 1) + obs.episode_fruits - 1.0
        )
        assert not obs.alive and obs.event == "death"
    env.close()


def test_grid_codes_and_observation_channels() -> None:
    env = SnakeEnvironment(height=8, width=10)
    obs = env.reset(seed=3)
    # the snake: head (4, 5), body (4, 4), tail (4, 3); the border is wall
    assert obs.grid[4][3:6] == [3, 4, 5]
    assert obs.grid[0] == [2] * 10 and [row[0] for row in obs.grid] == [2] * 8
    fr, fc = obs.fruit
    assert obs.grid[fr][fc] == 1
    assert len(obs.observation) == 8 and len(obs.observation[0]) == 10
    channels = {
        (r, c): cell.index(1.0)
        for r, row in enumerate(obs.observation)
        for c, cell in enumerate(row)
        if 1.0 in cell
    }
    assert channels[(4, 5)] == 7 and channels[(4, 4)] == 6 and channels[(4, 3)] == 5
    assert channels[(fr, fc)] == 0 and channels[(0, 0)] == 1
    assert all(sum(cell) <= 1 for row in obs.observation for cell in row)
    assert obs.board[4][3:6] == "ooH" and obs.board[0] == "#" * 10


def test_vision_range_crops_around_the_head() -> None:
    env = SnakeEnvironment(height=8, width=10, vision_range=2)
    obs = env.reset(seed=3)
    assert len(obs.observation) == 5 and len(obs.observation[0]) == 5
    assert obs.observation[2][2][7] == 1.0  # the head in the middle
    assert obs.observation[2][1][6] == 1.0  # the body to its left


def test_human_observer_moves_by_heading() -> None:
    env = SnakeEnvironment(observer="human")
    env.reset(seed=0)
    assert env.step(SnakeAction(action=4)).direction == "UP"
    assert env.step(SnakeAction(action=1)).direction == "LEFT"
    assert env.step(SnakeAction(action=2)).direction == "LEFT"  # straight back: ignored
    assert env.step(SnakeAction(action=3)).direction == "DOWN"
    assert env.step(SnakeAction(action=0)).direction == "DOWN"


def test_snake_observer_refuses_heading_actions() -> None:
    env = SnakeEnvironment()
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match="not a turn"):
        env.step(SnakeAction(action=3))
    assert env.state.step_count == 0


def test_reward_dict_and_filling_the_board_wins() -> None:
    rewards = {"fruit": 2.0, "kill": 0.0, "lose": -5.0, "win": 100.0, "time": 0.0}
    env = SnakeEnvironment(height=4, width=7, reward_dict=rewards)
    env.reset(seed=0)
    # a 2x5 inside: the snake fills all but the fruit's cell, which it then eats
    env._body = deque([(1, 1), (2, 1), (2, 2), (2, 3), (2, 4), (2, 5), (1, 5), (1, 4), (1, 3)])
    env._occupied = set(env._body)
    env._state.direction = "UP"
    env._state.fruit = [1, 2]
    obs = env.step(SnakeAction(direction="RIGHT"))
    assert obs.done and obs.event == "win" and obs.reward == pytest.approx(102.0)
    env.reset(seed=0)
    obs = env.step(SnakeAction(action=1))
    while not obs.done:
        obs = env.step(SnakeAction(action=0))
    assert obs.reward == pytest.approx(-5.0) and obs.episode_score == pytest.approx(-5.0)


def test_models_accept_what_openenvs_client_builds() -> None:
    """OpenEnv's client builds the observation field by field from the payload."""
    from snake_env import SnakeObservation

    obs = SnakeObservation(
        grid=[[2, 2], [2, 2]],
        observation=[[[0.0] * 8] * 2] * 2,
        episode_score=0.0,
        episode_steps=0,
        episode_fruits=0,
        episode_kills=0,
        alive=True,
        done=False,
        reward=None,
        metadata={},
    )
    assert obs.grid[0] == [2, 2] and obs.alive
