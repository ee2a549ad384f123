"""Chess against a built-in opponent; the reward comes from `ChessRubric`."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any
from uuid import uuid4

import chess
import chess.engine
import chess.pgn

from openenv.core.env_server import Environment

from ..models import ChessAction, ChessObservation, ChessState
from ..rubrics import ChessRubric

OPPONENTS = ("random", "greedy", "stockfish")
STOCKFISH_PATH = "/usr/games/stockfish"
PIECE_VALUES = {
    chess.PAWN: 1,
    chess.KNIGHT: 3,
    chess.BISHOP: 3,
    chess.ROOK: 5,
    chess.QUEEN: 9,
    chess.KING: 0,
}


def material(board: chess.Board, color: chess.Color) -> int:
    """Material of `color` minus the other side's."""
    total = 0
    for piece in board.piece_map().values():
        value = PIECE_VALUES[piece.piece_type]
        total += value if piece.color == color else -value
    return total


def greedy_move(board: chess.Board, rng: random.Random) -> chess.Move:
    """1-ply: mate if possible, else the move leaving the best material (ties at random)."""
    me = board.turn
    best: list[chess.Move] = []
    best_score = None
    for move in sorted(board.legal_moves, key=chess.Move.uci):
        board.push(move)
        score = 1000 if board.is_checkmate() else material(board, me)
        board.pop()
        if best_score is None or score > best_score:
            best, best_score = [move], score
        elif score == best_score:
            best.append(move)
    return rng.choice(best)


class ChessEnvironment(Environment[ChessAction, ChessObservation, ChessState]):
    """The agent plays `agent_color` against `opponent` ("random", "greedy" or "stockfish").

    An illegal move is rejected with the penalty (default -0.1, as in OpenEnv) as reward and the
    game goes on (`illegal_move="penalize"`), or loses the game (`illegal_move="lose"`). Draws by
    threefold repetition and the fifty-move rule are claimed at once. `agent_color=None` makes
    the agent alternate colours from one episode to the next (white first), OpenEnv's default."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    #: The /web playground draws the board with this script (docs/web.md).
    web_renderer = Path(__file__).with_name("web_renderer.js")
    # Not on the event loop: the greedy opponent takes up to a millisecond, Stockfish waits on I/O.

    def __init__(
        self,
        opponent: str = "random",
        illegal_move: str = "penalize",
        illegal_move_penalty: float = -0.1,
        max_moves: int | None = None,
        agent_color: str | None = "white",
        stockfish_path: str = STOCKFISH_PATH,
        stockfish_time: float = 0.05,
    ) -> None:
        super().__init__(rubric=ChessRubric(illegal_move_penalty))
        self._defaults = {
            "opponent": opponent,
            "illegal_move": illegal_move,
            "illegal_move_penalty": illegal_move_penalty,
            "max_moves": max_moves,
            "agent_color": agent_color,
        }
        self._episodes = 0
        self._stockfish_path = stockfish_path
        self._stockfish_time = stockfish_time
        self._engine: chess.engine.SimpleEngine | None = None
        self._rng = random.Random()
        self._board = chess.Board()
        self._san: list[str] = []
        self._start_number, self._start_white = 1, True
        self._last_opponent_move: str | None = None
        self._state = ChessState(
            episode_id=str(uuid4()), fen=self._board.fen(), start_fen=self._board.fen()
        )

    # -- the opponent ---------------------------------------------------------------------

    def _stockfish(self) -> chess.engine.SimpleEngine:
        if self._engine is None:
            path = self._stockfish_path
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise ValueError(
                    f"opponent='stockfish' needs the Stockfish binary at {path}, which is not "
                    "there; install it (e.g. apt-get install stockfish) or use opponent='random' "
                    "or 'greedy'"
                )
            self._engine = chess.engine.SimpleEngine.popen_uci(path)
        return self._engine

    def _opponent_move(self) -> chess.Move:
        board = self._board
        opponent = self._state.opponent
        if opponent == "greedy":
            return greedy_move(board, self._rng)
        if opponent == "stockfish":
            result = self._stockfish().play(board, chess.engine.Limit(time=self._stockfish_time))
            assert result.move is not None
            return result.move
        return self._rng.choice(sorted(board.legal_moves, key=chess.Move.uci))

    # -- bookkeeping ----------------------------------------------------------------------

    def _agent_color(self) -> chess.Color:
        return chess.WHITE if self._state.agent_color == "white" else chess.BLACK

    def _check_over(self) -> bool:
        outcome = self._board.outcome(claim_draw=True)
        if outcome is None:
            return False
        self._state.result = outcome.result()
        self._state.termination = outcome.termination.name.lower()
        return True

    def _over(self) -> bool:
        return self._state.termination is not None

    def _push(self, move: chess.Move) -> None:
        self._san.append(self._board.san(move))  # PGN movetext grows by one move, not rebuilt
        self._board.push(move)

    def _pgn(self) -> str:
        st = self._state
        agent, opponent = "agent", f"{st.opponent} opponent"
        white_is_agent = st.agent_color == "white"
        headers = [
            ("Event", "openenv chess_env"),
            ("White", agent if white_is_agent else opponent),
            ("Black", opponent if white_is_agent else agent),
            ("Result", st.result),
        ]
        if st.start_fen != chess.STARTING_FEN:
            headers += [("SetUp", "1"), ("FEN", st.start_fen)]
        number, white = self._start_number, self._start_white
        parts = []
        for index, san in enumerate(self._san):
            if white:
                parts.append(f"{number}. {san}")
            else:
                parts.append(f"{number}... {san}" if index == 0 else san)
                number += 1
            white = not white
        parts.append(st.result)
        return "\n".join(f'[{k} "{v}"]' for k, v in headers) + "\n\n" + " ".join(parts)

    def _observe(
        self, illegal: bool = False, message: str = "", reward: float | None = None
    ) -> ChessObservation:
        st = self._state
        board = self._board
        st.fen = board.fen()
        st.current_player = "white" if board.turn == chess.WHITE else "black"
        over = self._over()
        # OpenEnv's `result`: None while the game goes on, a game cut at max_moves is a draw.
        result = None if not over else ("1/2-1/2" if st.result == "*" else st.result)
        return ChessObservation(
            fen=st.fen,
            pgn=self._pgn(),
            legal_moves=[] if over else sorted(m.uci() for m in board.legal_moves),
            is_check=board.is_check(),
            last_opponent_move=self._last_opponent_move,
            agent_color=st.agent_color,
            result=result,
            termination=st.termination,
            illegal_move=illegal,
            message=message,
            reward=reward,
            done=over,
            metadata={
                "fullmove_number": board.fullmove_number,
                "halfmove_clock": board.halfmove_clock,
            },
        )

    def _reply(self) -> None:
        """The opponent moves while it is its turn and the game is on."""
        while not self._check_over() and self._board.turn != self._agent_color():
            move = self._opponent_move()
            self._push(move)
            self._last_opponent_move = move.uci()
            self._record(move)

    def _record(self, move: chess.Move) -> None:
        self._state.moves.append(move.uci())
        self._state.move_history.append(move.uci())

    # -- the API --------------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        fen: str | None = None,
        agent_color: str | None = None,
        opponent: str | None = None,
        illegal_move: str | None = None,
        illegal_move_penalty: float | None = None,
        max_moves: int | None = None,
        **kwargs: Any,
    ) -> ChessObservation:
        d = self._defaults
        opponent = d["opponent"] if opponent is None else opponent
        if opponent not in OPPONENTS:
            raise ValueError(f"unknown opponent {opponent!r}; choose one of {', '.join(OPPONENTS)}")
        if agent_color is None:
            agent_color = d["agent_color"]
        if agent_color is None:  # alternate: white in the first episode, black in the next
            agent_color = ("white", "black")[self._episodes % 2]
        if agent_color not in ("white", "black"):
            raise ValueError(f"agent_color must be 'white' or 'black', got {agent_color!r}")
        policy = d["illegal_move"] if illegal_move is None else illegal_move
        if policy not in ("penalize", "lose"):
            raise ValueError(f"illegal_move must be 'penalize' or 'lose', got {policy!r}")
        penalty = (
            d["illegal_move_penalty"] if illegal_move_penalty is None else illegal_move_penalty
        )
        try:
            board = chess.Board(fen) if fen else chess.Board()
        except ValueError as exc:
            raise ValueError(f"invalid FEN {fen!r}: {exc}") from exc
        if not board.is_valid():
            raise ValueError(f"the FEN {fen!r} is not a legal position ({board.status()!r})")
        if opponent == "stockfish":
            self._stockfish()  # fail now, with a clear message, when it is missing
        self._episodes += 1
        self._rng = random.Random(seed)
        self._board = board
        self._san = []
        self._start_number, self._start_white = board.fullmove_number, board.turn
        self._last_opponent_move = None
        self.rubric.illegal.penalty = float(penalty)
        self._state = ChessState(
            episode_id=episode_id or str(uuid4()),
            seed=seed,
            fen=board.fen(),
            start_fen=board.fen(),
            agent_color=agent_color,
            opponent=opponent,
            illegal_move_policy=policy,
            illegal_move_penalty=float(penalty),
            max_moves=d["max_moves"] if max_moves is None else int(max_moves),
        )
        self._reply()
        return self._observe(
            message=f"you play {agent_color} against the {opponent} opponent", reward=0.0
        )

    def step(
        self, action: ChessAction, timeout_s: float | None = None, **kwargs: Any
    ) -> ChessObservation:
        st = self._state
        if self._over():
            raise ValueError("The game is over: call reset()")
        st.step_count += 1
        text = action.move.strip()
        try:
            move = chess.Move.from_uci(text.lower())
        except ValueError:
            move = None
        if move is None or move not in self._board.legal_moves:
            st.illegal_moves += 1
            why = f"illegal move {text!r}" if move is not None else f"not a UCI move: {text!r}"
            if st.illegal_move_policy == "lose":
                st.result = "0-1" if st.agent_color == "white" else "1-0"
                st.termination = "illegal_move"
                return self._observe(illegal=True, message=f"{why}: the game is lost")
            return self._observe(illegal=True, message=f"{why}: rejected, play a legal move")
        self._push(move)
        san = self._san[-1]
        self._record(move)
        st.agent_moves += 1
        self._reply()
        if not self._over() and st.max_moves is not None and st.agent_moves >= st.max_moves:
            st.termination = "max_moves"
        message = f"you played {san}"
        if (
            self._last_opponent_move
            and self._board.move_stack[-1].uci() == self._last_opponent_move
        ):
            message += f", the opponent replied {self._last_opponent_move}"
        if self._over():
            message += f"; game over: {st.result} ({st.termination})"
        return self._observe(message=message)

    @property
    def state(self) -> ChessState:
        return self._state

    def close(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            try:
                engine.quit()
            except Exception:
                engine.close()
