"""Connect Four over the wire: wins, losses, draws, invalid moves, the opponents, two players."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from connect4_env import Connect4Action, Connect4Env, Connect4Observation
from connect4_env.server.connect4_environment import (
    Connect4Environment,
    connects_four,
    drop,
    greedy_column,
)
from openenv.testing import check_env, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("connect4_env.server.app:app") as url:
        yield url


def test_passes_the_environment_checker() -> None:
    report = check_env(Connect4Environment)
    assert report.ok, str(report)


def test_passes_the_environment_checker_in_two_player_mode() -> None:
    report = check_env(lambda: Connect4Environment(opponent="none"))
    assert report.ok, str(report)


def test_four_in_a_line_in_every_direction() -> None:
    lines = {
        "down": [(5, 0), (4, 0), (3, 0), (2, 0)],
        "across": [(5, 1), (5, 2), (5, 3), (5, 4)],
        "diagonal": [(5, 0), (4, 1), (3, 2), (2, 3)],
        "anti-diagonal": [(5, 6), (4, 5), (3, 4), (2, 3)],
    }
    for name, cells in lines.items():
        board = [[0] * 7 for _ in range(6)]
        for r, c in cells[:3]:
            board[r][c] = 1
        last = cells[3]
        assert not connects_four(board, *cells[2]), name
        board[last[0]][last[1]] = 1
        assert connects_four(board, *last), name
        board[last[0]][last[1]] = -1
        assert not connects_four(board, *last), name


def test_greedy_wins_then_blocks_then_avoids_giving_a_win() -> None:
    rng = random.Random(0)
    board = [[0] * 7 for _ in range(6)]
    for column in (0, 1, 2):
        drop(board, column, -1)  # the opponent (-1) has three across the bottom row
        drop(board, column, 1)
    assert greedy_column(board, -1, rng) == 3  # its own win
    assert greedy_column(board, 1, rng) == 3  # the agent's block
    # The agent (1) has three across row 4 and (4, 3) waits on (5, 3): the opponent's disc in
    # column 3 would let the agent win on top of it, so greedy plays next to it instead.
    board = [[0] * 7 for _ in range(6)]
    for column, bottom in zip((0, 1, 2), (-1, 1, -1), strict=True):
        drop(board, column, bottom)
        drop(board, column, 1)
    choices = {greedy_column(board, -1, random.Random(seed)) for seed in range(20)}
    assert choices == {2, 4}


async def test_connecting_four_wins(server: str) -> None:
    async with Connect4Env(base_url=server) as env:
        result = await env.reset(seed=1, opponent="none")
        assert result.reward == 0.0 and not result.done
        assert result.observation.board == [[0] * 7 for _ in range(6)]
        assert result.observation.legal_actions == list(range(7))
        for column in (0, 1, 0, 1, 0, 1):
            result = await env.step(Connect4Action(column=column))
            assert result.reward == 0.0 and not result.done
        result = await env.step(Connect4Action(column=0))
        assert result.done and result.reward == 1.0 and result.observation.result == "win"
        assert [row[0] for row in result.observation.board] == [0, 0, 1, 1, 1, 1]
        assert result.observation.legal_actions == []
        state = await env.state()
        assert state.moves == [0, 1, 0, 1, 0, 1, 0] and state.step_count == 7
        assert state.next_player == -1 and state.board == result.observation.board


async def test_the_greedy_opponent_blocks_a_column_of_three(server: str) -> None:
    async with Connect4Env(base_url=server) as env:
        await env.reset(seed=3)
        first = await env.step(Connect4Action(column=0))
        assert first.observation.last_opponent_move is not None
        await env.step(Connect4Action(column=0))
        third = await env.step(Connect4Action(column=0))
        assert third.observation.last_opponent_move == 0  # three stacked: it blocks
        assert third.observation.board[2][0] == -1 and not third.done
        assert (await env.state()).next_player == 1


async def test_a_lost_game_scores_minus_one(server: str) -> None:
    async with Connect4Env(base_url=server) as env:
        result = await env.reset(seed=0)
        for _ in range(21):  # always the first legal column: the greedy opponent wins
            result = await env.step(Connect4Action(column=result.observation.legal_actions[0]))
            if result.done:
                break
        assert result.done and result.observation.result == "loss"
        assert result.reward == -1.0
        assert sum(row.count(-1) for row in result.observation.board) == sum(
            row.count(1) for row in result.observation.board
        )


@pytest.mark.parametrize("column", [7, -1])
async def test_a_column_off_the_board_loses(server: str, column: int) -> None:
    async with Connect4Env(base_url=server) as env:
        await env.reset(seed=0)
        result = await env.step(Connect4Action(column=column))
        assert result.done and result.reward == -1.0
        assert result.observation.result == "invalid_move"


async def test_a_full_column_loses_and_a_step_after_the_end_is_an_error(server: str) -> None:
    async with Connect4Env(base_url=server) as env:
        await env.reset(opponent="none")
        for _ in range(6):
            result = await env.step(Connect4Action(column=2))
        assert 2 not in result.observation.legal_actions and not result.done
        result = await env.step(Connect4Action(column=2))
        assert result.done and result.reward == -1.0
        with pytest.raises(Exception, match="call reset"):
            await env.step(Connect4Action(column=3))
        again = await env.reset()  # the session stays usable
        assert not again.done


async def test_a_full_board_is_a_draw(server: str) -> None:
    # Column pairs fill the board without four in a line: 0,1 / 2,3 / 4,5 in blocks of three
    # rows, then 6 alone.
    order = []
    for pair in ((0, 1), (2, 3), (4, 5)):
        order += [pair[0], pair[1]] * 3 + [pair[1], pair[0]] * 3
    order += [6] * 6
    async with Connect4Env(base_url=server) as env:
        await env.reset(opponent="none")
        for i, column in enumerate(order):
            result = await env.step(Connect4Action(column=column))
            assert result.done == (i == len(order) - 1), (i, result.observation.result)
        assert result.observation.result == "draw" and result.reward == 0.0


async def test_opponent_first_and_seeded(server: str) -> None:
    async with Connect4Env(base_url=server) as env:
        first = await env.reset(seed=5, opponent="random", agent_first=False)
        again = await env.reset(seed=5, opponent="random", agent_first=False)
        column = first.observation.last_opponent_move
        assert column is not None and column == again.observation.last_opponent_move
        assert first.observation.board[5][column] == -1
        assert first.observation.metadata["next_player"] == 1


def test_unknown_opponent_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown opponent"):
        Connect4Environment().reset(opponent="minimax")


def test_observation_defaults_match_openenv() -> None:
    obs = Connect4Observation()
    assert obs.board == [] and obs.legal_actions == [] and obs.reward is None
