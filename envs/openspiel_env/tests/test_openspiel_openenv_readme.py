"""OpenEnv's `openspiel_env` README code, run against this package's served environment.

The snippets are written as OpenEnv's README shows them (imports, class and field names,
`OPENSPIEL_GAME` / `OPENSPIEL_OPPONENT_POLICY` server settings). The one change: this package's
client is async, so the blocking calls go through `.sync()`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openenv.testing import running_server

APP = "openspiel_env.server.app:app"


@pytest.fixture(scope="module")
def default_server() -> Iterator[str]:
    """The server as `docker run openspiel-env` starts it: no settings, so `catch`."""
    with running_server(APP, env={"OPENSPIEL_GAME": ""}) as url:
        yield url


@pytest.fixture(scope="module")
def tic_tac_toe_server() -> Iterator[str]:
    """README: "Tic-Tac-Toe with Fixed Opponent"."""
    env = {"OPENSPIEL_GAME": "tic_tac_toe", "OPENSPIEL_OPPONENT_POLICY": "first"}
    with running_server(APP, env=env) as url:
        yield url


def test_quick_start_plays_catch_to_the_end(default_server: str) -> None:
    from openspiel_env import OpenSpielAction, OpenSpielEnv

    env = OpenSpielEnv(base_url=default_server).sync()
    try:
        result = env.reset()
        assert len(result.observation.info_state) == 50  # catch: a 10x5 grid, flattened
        assert result.observation.legal_actions == [0, 1, 2]
        assert result.observation.game_phase == "initial"
        rewards, dones = [], []
        while not result.done:
            action_id = result.observation.legal_actions[0]
            result = env.step(OpenSpielAction(action_id=action_id))
            rewards.append(result.reward)
            dones.append(result.done)
    finally:
        env.close()
    # catch: the ball falls 9 rows; 0 on every step but the last, then +1 (caught) or -1
    assert len(rewards) == 9 and rewards[:-1] == [0.0] * 8 and rewards[-1] in (-1.0, 1.0)
    assert dones == [False] * 8 + [True]
    assert result.observation.game_phase == "terminal" and result.observation.legal_actions == []


def test_connecting_to_an_existing_server(tic_tac_toe_server: str) -> None:
    from openspiel_env import OpenSpielAction, OpenSpielEnv

    env = OpenSpielEnv(base_url=tic_tac_toe_server).sync()
    result = env.reset()
    result = env.step(OpenSpielAction(action_id=result.observation.legal_actions[0]))
    # x took square 0, the "first" opponent answered with the lowest free square
    assert result.observation.opponent_last_action == 1
    assert result.observation.game_phase == "playing" and result.reward == 0.0
    assert result.observation.current_player_id == 0
    while not result.done:  # x: 0, 2, 4, 6 (a diagonal) against o: 1, 3, 5
        result = env.step(OpenSpielAction(action_id=result.observation.legal_actions[0]))
    assert result.reward == 1.0 and result.observation.opponent_last_action == 5
    state = env.state()
    assert (state.game_name, state.opponent_policy, state.agent_player) == (
        "tic_tac_toe",
        "first",
        0,
    )
    assert state.num_players == 2 and state.game_params == {} and state.step_count == 4
    env.close()


def test_client_docstring_action_carries_the_game_name(default_server: str) -> None:
    """OpenEnv's client sends `game_name` / `game_params` with every action; both are accepted."""
    from openspiel_env import OpenSpielAction, OpenSpielEnv

    with OpenSpielEnv(base_url=default_server).sync() as client:
        result = client.reset()
        assert result.observation.info_state
        result = client.step(OpenSpielAction(action_id=1, game_name="catch"))
        assert result.observation.reward == result.reward == 0.0


def test_direct_environment_testing() -> None:
    from openspiel_env.models import OpenSpielAction
    from openspiel_env.server.openspiel_environment import OpenSpielEnvironment

    env = OpenSpielEnvironment(game_name="catch")
    obs = env.reset()
    assert len(obs.info_state) == 50
    obs = env.step(OpenSpielAction(action_id=0))
    assert obs.done is False and obs.reward == 0.0
    assert env.state.game_name == "catch" and env.state.opponent_policy == "random"


def test_models_accept_what_openenvs_client_builds() -> None:
    """OpenEnv's client builds the models field by field from the payload; ours take the same."""
    from openspiel_env.models import OpenSpielObservation, OpenSpielState

    obs = OpenSpielObservation(
        info_state=[0.0, 1.0],
        legal_actions=[0, 1],
        game_phase="playing",
        current_player_id=0,
        opponent_last_action=None,
        done=False,
        reward=None,
        metadata={},
    )
    state = OpenSpielState(
        episode_id="e",
        step_count=0,
        game_name="catch",
        agent_player=0,
        opponent_policy="random",
        game_params={},
        num_players=1,
    )
    assert obs.info_state == [0.0, 1.0] and state.game_name == "catch"
