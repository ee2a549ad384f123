"""Connect Four against a built-in opponent, with OpenEnv's rewards: +1 for connecting four,
-1 and the game lost for an invalid move (a full column or one off the board), 0 for a draw;
losing to the opponent is -1."""

from __future__ import annotations

import random
from typing import Any, get_args
from uuid import uuid4

from openenv.core.env_server import Environment

from ..models import (
    COLUMNS,
    ROWS,
    Connect4Action,
    Connect4Observation,
    Connect4State,
    Opponent,
    empty_board,
)

OPPONENTS: tuple[str, ...] = get_args(Opponent)
WIN_REWARD, LOSS_REWARD, DRAW_REWARD, INVALID_REWARD = 1.0, -1.0, 0.0, -1.0
#: the four lines through a cell: down, across and both diagonals
DIRECTIONS = ((1, 0), (0, 1), (1, 1), (1, -1))


def legal_columns(board: list[list[int]]) -> list[int]:
    return [c for c in range(COLUMNS) if board[0][c] == 0]


def drop(board: list[list[int]], column: int, player: int) -> int:
    """Put `player`'s disc on top of `column` (which must have room); return its row."""
    for row in range(ROWS - 1, -1, -1):
        if board[row][column] == 0:
            board[row][column] = player
            return row
    raise ValueError(f"column {column} is full")


def connects_four(board: list[list[int]], row: int, column: int) -> bool:
    """True when the disc at (row, column) is part of four in a line."""
    player = board[row][column]
    for dr, dc in DIRECTIONS:
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, column + sign * dc
            while 0 <= r < ROWS and 0 <= c < COLUMNS and board[r][c] == player:
                count += 1
                r, c = r + sign * dr, c + sign * dc
        if count >= 4:
            return True
    return False


def _wins_with(board: list[list[int]], column: int, player: int) -> bool:
    row = drop(board, column, player)
    won = connects_four(board, row, column)
    board[row][column] = 0
    return won


def greedy_column(board: list[list[int]], me: int, rng: random.Random) -> int:
    """Win now if it can, else block the other side's win, else avoid giving it a win on top of
    the disc; among what is left prefer the central columns (ties by the seeded RNG)."""
    legal = legal_columns(board)
    for player in (me, -me):
        for column in legal:
            if _wins_with(board, column, player):
                return column
    safe = []
    for column in legal:
        row = drop(board, column, me)
        if row == 0 or not _wins_with(board, column, -me):
            safe.append(column)
        board[row][column] = 0
    options = safe or legal
    best = min(abs(c - COLUMNS // 2) for c in options)
    return rng.choice([c for c in options if abs(c - COLUMNS // 2) == best])


class Connect4Environment(Environment[Connect4Action, Connect4Observation, Connect4State]):
    """The agent (1) plays against `opponent` (-1): "greedy" (the default), "random" or "none"
    (OpenEnv's two-player mode: the agent plays both sides in turn and the reward goes to the
    side that moved). A step after the game is over is an error."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUNS_ON_EVENT_LOOP = True  # the greedy opponent checks a few hundred cells

    def __init__(self, opponent: str = "greedy") -> None:
        super().__init__()
        self._check_opponent(opponent)
        self._opponent = opponent
        self._rng = random.Random()
        self._board = empty_board()
        self._last_opponent_move: int | None = None
        self._state = Connect4State(episode_id=str(uuid4()), opponent=opponent)

    @staticmethod
    def _check_opponent(opponent: str) -> None:
        if opponent not in OPPONENTS:
            raise ValueError(f"unknown opponent {opponent!r}; choose one of {', '.join(OPPONENTS)}")

    def _observe(self, reward: float, message: str = "") -> Connect4Observation:
        st = self._state
        st.board = [list(row) for row in self._board]
        over = st.result is not None
        return Connect4Observation(
            board=[list(row) for row in self._board],
            legal_actions=[] if over else legal_columns(self._board),
            last_opponent_move=self._last_opponent_move,
            result=st.result,
            message=message,
            reward=reward,
            done=over,
            metadata={"next_player": st.next_player},
        )

    def _opponent_moves(self) -> tuple[float, str]:
        """The opponent (-1) drops a disc; the reward and message when that ends the game."""
        st = self._state
        if st.opponent == "greedy":
            column = greedy_column(self._board, -1, self._rng)
        else:
            column = self._rng.choice(legal_columns(self._board))
        row = drop(self._board, column, -1)
        st.moves.append(column)
        self._last_opponent_move = column
        if connects_four(self._board, row, column):
            st.result = "loss"
            return LOSS_REWARD, f"the opponent connected four with column {column}: you lose"
        if not legal_columns(self._board):
            st.result = "draw"
            return DRAW_REWARD, "the board is full: a draw"
        return 0.0, f"the opponent played column {column}"

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        opponent: str | None = None,
        agent_first: bool = True,
        **kwargs: Any,
    ) -> Connect4Observation:
        opponent = self._opponent if opponent is None else opponent
        self._check_opponent(opponent)
        self._rng = random.Random(seed)
        self._board = empty_board()
        self._last_opponent_move = None
        self._state = Connect4State(
            episode_id=episode_id or str(uuid4()),
            seed=seed,
            opponent=opponent,  # type: ignore[arg-type]  # checked above
            agent_first=bool(agent_first),
        )
        message = "drop a disc: Connect4Action(column=0..6)"
        if opponent != "none" and not agent_first:
            _, message = self._opponent_moves()
        return self._observe(reward=0.0, message=message)

    def step(
        self, action: Connect4Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Connect4Observation:
        st = self._state
        if st.result is not None:
            raise ValueError("The game is over: call reset()")
        st.step_count += 1
        column, player = action.column, st.next_player
        if not 0 <= column < COLUMNS or self._board[0][column] != 0:
            st.result = "invalid_move"
            st.next_player = -player
            why = "is off the board" if not 0 <= column < COLUMNS else "is full"
            return self._observe(INVALID_REWARD, f"column {column} {why}: the game is lost")
        row = drop(self._board, column, player)
        st.moves.append(column)
        st.next_player = -player
        if connects_four(self._board, row, column):
            st.result = "win"
            return self._observe(WIN_REWARD, f"column {column} connects four: you win")
        if not legal_columns(self._board):
            st.result = "draw"
            return self._observe(DRAW_REWARD, "the board is full: a draw")
        if st.opponent == "none":
            return self._observe(0.0, f"player {-player} to move")
        reward, message = self._opponent_moves()
        st.next_player = 1 if st.result is None else -1
        return self._observe(reward, message)

    @property
    def state(self) -> Connect4State:
        return self._state
