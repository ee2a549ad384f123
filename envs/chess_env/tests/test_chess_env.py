"""Chess over the wire: wins, losses, draws, illegal moves, colours, opponents."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest

from chess_env import ChessAction, ChessEnv
from chess_env.server.chess_environment import STOCKFISH_PATH, ChessEnvironment
from openenv.testing import check_env, running_server

MATE_IN_ONE = "6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1"  # a1a8#
STALEMATE_IN_ONE = "k7/8/1Q6/8/8/8/8/7K w - - 0 1"  # b6c7 stalemates
LOSING = "kr6/8/8/8/8/8/P5PP/7K w - - 0 1"  # after a2a3 the greedy opponent mates with b8b1


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("chess_env.server.app:app") as url:
        yield url


def test_passes_the_environment_checker() -> None:
    samples = [ChessAction(move=m) for m in ("e2e4", "g1f3", "zz", "f1c4", "d2d4", "b1c3")]
    report = check_env(ChessEnvironment, sample_actions=samples)
    assert report.ok, str(report)


async def test_checkmate_wins(server: str) -> None:
    async with ChessEnv(base_url=server) as env:
        result = await env.reset(fen=MATE_IN_ONE)
        assert "a1a8" in result.observation.legal_moves
        assert result.reward == 0.0 and result.observation.result is None
        result = await env.step(ChessAction(move="a1a8"))
        assert result.done and result.reward == pytest.approx(1.0)
        obs = result.observation
        assert obs.result == "1-0" and obs.termination == "checkmate"
        assert obs.legal_moves == [] and obs.pgn.rstrip().endswith("1-0")
        assert result.metadata["reward_components"]["outcome"] == 1.0
        state = await env.state()
        assert state.result == "1-0" and state.moves == ["a1a8"] and state.agent_moves == 1
        assert state.move_history == ["a1a8"] and state.current_player == "black"


async def test_greedy_opponent_mates(server: str) -> None:
    async with ChessEnv(base_url=server) as env:
        await env.reset(fen=LOSING, opponent="greedy", seed=0)
        result = await env.step(ChessAction(move="a2a3"))
        assert result.done and result.reward == pytest.approx(-1.0)
        assert result.observation.last_opponent_move == "b8b1"
        assert result.observation.result == "0-1"
        assert result.observation.is_check  # the agent is mated


async def test_stalemate_is_a_draw(server: str) -> None:
    async with ChessEnv(base_url=server) as env:
        await env.reset(fen=STALEMATE_IN_ONE)
        result = await env.step(ChessAction(move="b6c7"))
        assert result.done and result.reward == pytest.approx(0.0)
        assert result.observation.result == "1/2-1/2"
        assert result.observation.termination == "stalemate"


async def test_illegal_moves_are_penalized_and_rejected(server: str) -> None:
    async with ChessEnv(base_url=server) as env:
        start = await env.reset(seed=1)
        for bad in ("e2e5", "hello", ""):
            result = await env.step(ChessAction(move=bad))
            assert not result.done and result.reward == pytest.approx(-0.1)
            assert result.observation.illegal_move
            assert result.observation.fen == start.observation.fen
        result = await env.step(ChessAction(move="e2e4"))
        assert not result.done and result.reward == pytest.approx(0.0)
        assert not result.observation.illegal_move
        assert result.observation.last_opponent_move is not None
        state = await env.state()
        assert state.illegal_moves == 3 and state.agent_moves == 1 and len(state.moves) == 2
        assert state.move_history == state.moves and state.step_count == 4


async def test_illegal_move_can_lose_the_game(server: str) -> None:
    async with ChessEnv(base_url=server) as env:
        await env.reset(illegal_move="lose")
        result = await env.step(ChessAction(move="e1e2"))
        assert result.done and result.reward == pytest.approx(-1.0)
        assert result.observation.termination == "illegal_move"
        assert result.observation.result == "0-1"


async def test_custom_penalty(server: str) -> None:
    async with ChessEnv(base_url=server) as env:
        await env.reset(illegal_move_penalty=-0.25)
        result = await env.step(ChessAction(move="a1a8"))
        assert result.reward == pytest.approx(-0.25)


async def test_playing_black_opponent_moves_first(server: str) -> None:
    async with ChessEnv(base_url=server) as env:
        first = await env.reset(seed=7, agent_color="black")
        again = await env.reset(seed=7, agent_color="black")
        obs = first.observation
        assert obs.agent_color == "black" and obs.fen.split()[1] == "b"
        assert obs.last_opponent_move is not None
        assert again.observation.last_opponent_move == obs.last_opponent_move
        assert len(obs.legal_moves) == 20


async def test_full_random_game(server: str) -> None:
    rng = random.Random(0)
    async with ChessEnv(base_url=server) as env:
        result = await env.reset(seed=2, opponent="greedy")
        for _ in range(600):
            result = await env.step(ChessAction(move=rng.choice(result.observation.legal_moves)))
            if result.done:
                break
        else:
            pytest.fail("the game did not end")
        obs = result.observation
        expected = {"1-0": 1.0, "0-1": -1.0, "1/2-1/2": 0.0}[obs.result]
        assert result.reward == pytest.approx(expected)
        assert obs.termination is not None
        state = await env.state()
        assert state.result == obs.result and obs.pgn.rstrip().endswith(obs.result)


async def test_max_moves_cuts_the_game(server: str) -> None:
    async with ChessEnv(base_url=server) as env:
        await env.reset(seed=0, max_moves=2)
        await env.step(ChessAction(move="e2e4"))
        result = await env.step(ChessAction(move="d2d4"))
        assert result.observation.termination == "max_moves"
        # OpenEnv's reading: a game cut at max_moves is a draw; the PGN keeps "*" (unfinished).
        assert result.done and result.reward == 0.0 and result.observation.result == "1/2-1/2"
        assert result.observation.pgn.rstrip().endswith("*")
        assert (await env.state()).result == "*"


@pytest.mark.skipif(os.path.exists(STOCKFISH_PATH), reason="Stockfish is installed")
async def test_stockfish_missing_is_a_clear_error(server: str) -> None:
    async with ChessEnv(base_url=server) as env:
        with pytest.raises(Exception, match="Stockfish"):
            await env.reset(opponent="stockfish")
        result = await env.reset(opponent="random")  # the session stays usable
        assert not result.done


@pytest.mark.skipif(not os.path.exists(STOCKFISH_PATH), reason="Stockfish is not installed")
async def test_stockfish_opponent(server: str) -> None:
    async with ChessEnv(base_url=server) as env:
        result = await env.reset(opponent="stockfish", agent_color="black")
        assert result.observation.last_opponent_move is not None


@pytest.mark.parametrize(
    "fen, color",
    [
        (None, "white"),
        ("r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R b KQkq - 2 2", "black"),
    ],
)
def test_pgn_replays_to_the_observed_position(fen, color) -> None:
    """The PGN is kept move by move; it must still parse back to the exact game."""
    import io
    import random

    import chess.pgn

    from chess_env.server.chess_environment import ChessEnvironment

    env = ChessEnvironment()
    rng = random.Random(1)
    obs = env.reset(seed=1, fen=fen, agent_color=color)
    for _ in range(40):
        if obs.done:
            break
        obs = env.step(ChessAction(move=rng.choice(obs.legal_moves)))
    game = chess.pgn.read_game(io.StringIO(obs.pgn))
    assert game.end().board().fen() == obs.fen
    assert len(list(game.mainline_moves())) == len(env.state.moves)


def test_agent_colour_alternates_when_the_server_says_none() -> None:
    """OpenEnv's default (`agent_color=None`): white, then black, then white; an explicit
    colour at reset still wins."""
    env = ChessEnvironment(agent_color=None)
    colours = [env.reset(seed=i).agent_color for i in range(3)]
    assert colours == ["white", "black", "white"]
    assert env.reset(agent_color="white").agent_color == "white"
    assert ChessEnvironment().reset().agent_color == "white"
