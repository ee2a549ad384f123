"""The client code OpenEnv's connect4_env documents (its client's and package's docstrings),
run against this Connect Four environment.

The snippets are OpenEnv's, unchanged: a plain `with Connect4Env(...) as client:` block and
calls without `await` work with this package's client as with OpenEnv 0.10's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from connect4_env import Connect4Action, Connect4Env, Connect4Observation, Connect4State
from openenv.testing import running_server


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with running_server("connect4_env.server.app:app") as url:
        yield url


def test_client_docstring_example(base_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with Connect4Env(base_url=base_url) as client:
        result = client.reset()
        print(result.observation.board)

        result = client.step(Connect4Action(column=3))
        print(result.reward, result.done)

    out = capsys.readouterr().out.splitlines()
    assert out == [str([[0] * 7 for _ in range(6)]), "0.0 False"]
    obs = result.observation
    assert isinstance(obs, Connect4Observation)
    assert obs.board[5][3] == 1  # the agent's disc at the bottom of column 3
    assert sum(row.count(-1) for row in obs.board) == 1  # and the opponent's reply


def test_package_docstring_example_and_state(base_url: str) -> None:
    env = Connect4Env(base_url=base_url)
    # Reset and interact
    result = env.reset()
    result = env.step(Connect4Action(column=2))
    print(result.reward, result.done)
    state = env.state()
    # Cleanup
    env.close()

    assert isinstance(state, Connect4State)
    assert state.board == result.observation.board and state.next_player == 1
    assert state.step_count == 1


def test_openenv_two_player_game(base_url: str) -> None:
    """Without an opponent the board alternates 1 and -1 and the mover gets +1 for four."""
    with Connect4Env(base_url=base_url) as client:
        result = client.reset(opponent="none")
        assert result.observation.metadata["next_player"] == 1
        for column in (3, 4, 3, 4, 3, 4):
            result = client.step(Connect4Action(column=column))
        assert result.observation.metadata["next_player"] == 1
        assert [row[3] for row in result.observation.board][3:] == [1, 1, 1]
        assert [row[4] for row in result.observation.board][3:] == [-1, -1, -1]
        result = client.step(Connect4Action(column=3))
        assert (result.reward, result.done) == (1.0, True)
