"""The client code of OpenEnv's maze_env README, run against this maze environment.

The snippets are OpenEnv's, unchanged: plain calls without `await`
(`env = MazeEnv(base_url=...); env.reset()`) work with this package's client as with OpenEnv
0.10's. The README's Docker variant (`MazeEnv.from_docker_image(...)`) is the same loop.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from maze_env import MazeAction, MazeEnv
from openenv.testing import running_server

#: The README's default maze (0 empty, 1 wall), coordinates (col, row) from the upper left.
README_MAZE = """
0 0 0 0 0 1 0 0
1 1 0 1 0 1 0 1
0 0 0 1 0 0 0 1
0 1 1 1 1 1 0 0
0 0 0 0 0 0 1 0
1 0 1 1 1 0 0 0
0 0 0 0 1 0 1 0
0 1 1 0 0 0 0 0
"""


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with running_server("maze_env.server.app:app") as url:
        yield url


def test_readme_quick_start(base_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    env = MazeEnv(base_url=base_url)
    try:
        # Reset to start a new episode
        result = env.reset()
        print(f"Start position: {result.observation.current_position}")
        print(f"Legal actions: {result.observation.legal_actions}")

        # Play until done
        while not result.done:
            action_id = result.observation.legal_actions[0]
            result = env.step(MazeAction(action=action_id))
            print(f"Position: {result.observation.current_position}")
            print(f"Reward: {result.reward}, Done: {result.done}")

    finally:
        # Always clean up
        env.close()

    out = capsys.readouterr().out
    assert "Start position: [0, 0]\nLegal actions: [3]\n" in out
    # The first legal action walks right then back left forever: OpenEnv's rule ends the
    # episode as lost once the rewards add up to less than -0.5 per cell (-32 here).
    assert result.observation.status == "lose" and result.observation.legal_actions == []
    assert result.metadata["status"] == "lose"
    assert "Reward: -0.25, Done: False" in out


def test_readme_connecting_to_an_existing_server(base_url: str) -> None:
    # Connect to existing server
    env = MazeEnv(base_url=base_url)

    # Use as normal
    result = env.reset()
    result = env.step(MazeAction(action=result.observation.legal_actions[0]))

    # Close connection (does NOT stop the server)
    env.close()

    assert result.observation.current_position == [1, 0]
    assert result.observation.previous_position == [0, 0]
    assert result.reward == pytest.approx(-0.05)


def test_readme_layout_rewards_and_state(base_url: str) -> None:
    """The README's maze, action numbers, rewards and state fields."""
    walls = [[int(v) for v in line.split()] for line in README_MAZE.strip().splitlines()]
    with MazeEnv(base_url=base_url) as env:
        result = env.reset()
        assert result.metadata["maze"] == walls
        assert result.metadata["exit_cell"] == [7, 7] and result.metadata["status"] == "playing"
        assert result.reward == 0.0
        assert env.step(MazeAction(action=0)).reward == pytest.approx(-0.75)  # up: off the maze
        assert env.step(MazeAction(action=1)).reward == pytest.approx(-0.75)  # down: a wall
        # Right along row 0, down column 2, left to column 0, down to row 4, right to column
        # 5, down to row 7, right to the exit at (7, 7).
        path = [3, 3, 1, 1, 2, 2, 1, 1, 3, 3, 3, 3, 3, 1, 1, 1, 3, 3]
        rewards = [env.step(MazeAction(action=a)).reward for a in path]
        assert rewards == pytest.approx([-0.05] * (len(path) - 1) + [10.0])
        state = env.state()
        assert state.done and state.status == "win"
        assert state.current_position == [7, 7] and state.exit_cell == [7, 7]
        assert state.step_count == len(path) + 2
