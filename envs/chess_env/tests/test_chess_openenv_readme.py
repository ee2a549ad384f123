"""The client code of OpenEnv's chess_env README, run against this chess environment.

The snippet is OpenEnv's, unchanged: the plain `with ChessEnv(...) as env:` block and calls
without `await`, as OpenEnv 0.10's client allows, work with this package's client too.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chess_env import ChessAction, ChessEnv
from openenv.testing import running_server


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with running_server("chess_env.server.app:app") as url:
        yield url


def test_readme_quick_start(base_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with ChessEnv(base_url=base_url) as env:
        # Reset for a new game
        result = env.reset()
        print(f"Starting position: {result.observation.fen}")
        print(f"Legal moves: {result.observation.legal_moves}")

        # Make a move
        result = env.step(ChessAction(move="e2e4"))
        print(f"Reward: {result.reward}, Done: {result.done}")

        # Play until game ends
        while not result.done:
            # Your policy here
            move = result.observation.legal_moves[0]
            result = env.step(ChessAction(move=move))

        print(f"Game result: {result.observation.result}")

    out = capsys.readouterr().out
    assert "Starting position: rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1" in out
    assert "Reward: 0.0, Done: False" in out
    assert result.observation.result in ("1-0", "0-1", "1/2-1/2")
    # OpenEnv's reward table: +1 win, -1 loss, 0 draw (the agent plays white by default).
    expected = {"1-0": 1.0, "0-1": -1.0, "1/2-1/2": 0.0}[result.observation.result]
    assert result.reward == pytest.approx(expected)


def test_readme_observation_and_rewards(base_url: str) -> None:
    """The README's observation table (fen, legal_moves, is_check, done, reward, result) and its
    illegal-move reward."""
    with ChessEnv(base_url=base_url) as env:
        result = env.reset()
        obs = result.observation
        assert isinstance(obs.fen, str) and isinstance(obs.legal_moves, list)
        assert obs.is_check is False and obs.result is None and result.done is False
        assert len(obs.legal_moves) == 20 and "e2e4" in obs.legal_moves
        illegal = env.step(ChessAction(move="e2e5"))
        assert illegal.reward == pytest.approx(-0.1) and not illegal.done
        assert illegal.observation.fen == obs.fen  # no state change
        # Black to move while the agent plays white: the opponent moves first.
        result = env.reset(fen="rnbqkbnr/pppp1ppp/8/4p3/6P1/5P2/PPPPP2P/RNBQKBNR b KQkq g3 0 2")
        assert result.observation.fen.split()[1] == "w"  # the opponent moved first
        state = env.state()
        assert state.current_player == "white" and len(state.move_history) == 1


def test_readme_check_is_reported(base_url: str) -> None:
    with ChessEnv(base_url=base_url) as env:
        # White to move is in check from the bishop on b4.
        result = env.reset(fen="rnbqk1nr/pppp1ppp/8/4p3/1b1P4/8/PPP1PPPP/RNBQKBNR w KQkq - 1 3")
        assert result.observation.is_check is True
