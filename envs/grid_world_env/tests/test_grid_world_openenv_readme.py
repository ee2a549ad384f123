"""OpenEnv's grid_world_env README, run against this grid world: its models (`MoveAction`,
`GridWorldAction(action=...)`, `GridWorldObservation` with `x`, `y`, `message`) and its
"Example Gameplay" (x is the row: DOWN moves from (0,0) to (1,0); -0.1 per step, +1.0 and done
at (4,4)).

The client code is OpenEnv's, unchanged: plain calls without `await`, as with OpenEnv 0.10.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grid_world_env import GridWorldAction, GridWorldEnv, GridWorldObservation
from grid_world_env.models import MoveAction
from openenv.testing import running_server


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with running_server("grid_world_env.server.app:app") as url:
        yield url


def test_readme_example_gameplay(base_url: str) -> None:
    with GridWorldEnv(base_url=base_url) as env:
        # 1. Reset: Agent at (0,0) -> Obs(x=0, y=0, reward=0.0, done=False)
        result = env.reset()
        obs = result.observation
        assert isinstance(obs, GridWorldObservation)
        assert (obs.x, obs.y, obs.reward, obs.done) == (0, 0, 0.0, False)
        # 2. Step DOWN: Agent moves to (1,0) -> Obs(x=1, y=0, reward=-0.1, done=False)
        obs = env.step(GridWorldAction(action=MoveAction.DOWN)).observation
        assert (obs.x, obs.y, obs.reward, obs.done) == (1, 0, -0.1, False)
        # 3. Step RIGHT: Agent moves to (1,1) -> Obs(x=1, y=1, reward=-0.1, done=False)
        obs = env.step(GridWorldAction(action=MoveAction.RIGHT)).observation
        assert (obs.x, obs.y, obs.reward, obs.done) == (1, 1, -0.1, False)
        # 4. ... down to row 4 and right to (4,3)
        for move in (MoveAction.DOWN, MoveAction.DOWN, MoveAction.DOWN, MoveAction.RIGHT):
            obs = env.step(GridWorldAction(action=move)).observation
            assert obs.reward == pytest.approx(-0.1) and not obs.done
        assert (obs.x, obs.y) == (4, 2)
        obs = env.step(GridWorldAction(action=MoveAction.RIGHT)).observation
        assert (obs.x, obs.y) == (4, 3)
        # 5. Step RIGHT (from 4,3): Agent moves to (4,4) -> Obs(x=4, y=4, reward=1.0, done=True)
        result = env.step(GridWorldAction(action=MoveAction.RIGHT))
        obs = result.observation
        assert (obs.x, obs.y, obs.reward, obs.done) == (4, 4, 1.0, True)
        assert obs.message and obs.suggested_action is None
        state = env.state()
        assert state.step_count == 8 and (state.agent_x, state.agent_y) == (4, 4)


def test_readme_moves_are_clamped_and_plain_strings_work(base_url: str) -> None:
    """ "An action always moves the agent one step ... unless it would move off the grid, in
    which case the agent stays in its current cell"; the wire form is {"action": "UP"}."""
    with GridWorldEnv(base_url=base_url) as env:
        env.reset()
        result = env.step(GridWorldAction(action="UP"))
        assert (result.observation.x, result.observation.y) == (0, 0)
        assert result.reward == pytest.approx(-0.1) and not result.done
        result = env.step({"action": "LEFT"})  # a wire dict, as a generic client sends it
        assert (result.observation.x, result.observation.y) == (0, 0)


def test_openenv_and_project_spellings_of_the_action_agree() -> None:
    assert GridWorldAction(action=MoveAction.UP) == GridWorldAction(direction="UP")
    assert GridWorldAction(action="LEFT").model_dump(exclude={"metadata"}) == {
        "action": MoveAction.LEFT,
        "direction": MoveAction.LEFT,
    }
    with pytest.raises(ValueError, match="disagree"):
        GridWorldAction(action="UP", direction="DOWN")
    with pytest.raises(ValueError, match="action="):
        GridWorldAction()
    with pytest.raises(ValueError):
        GridWorldAction(action="NORTH")
