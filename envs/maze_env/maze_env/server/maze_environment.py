"""A walled maze with OpenEnv's rules: -0.05 per move to a new cell, -0.25 to a visited one,
-0.75 for bumping a wall (the agent stays put), +10 and done at the exit ("win"); the episode is
lost ("lose", done) once the rewards add up to less than -0.5 per cell of the maze."""

from __future__ import annotations

import random
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Environment

from ..models import MazeAction, MazeObservation, MazeState

#: 0 up, 1 down, 2 left, 3 right
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))
MOVE_REWARD = -0.05
REVISIT_REWARD = -0.25
WALL_REWARD = -0.75
EXIT_REWARD = 10.0
#: The episode is lost when the total reward falls below this many points per cell.
LOSE_PER_CELL = -0.5

#: The default 8x8 maze, the one OpenEnv's maze_env ships: `#` wall, `.` open, `S` start,
#: `E` exit.
DEFAULT_LAYOUT = (
    "S....#..",
    "##.#.#.#",
    "...#...#",
    ".#####..",
    "......#.",
    "#.###...",
    "....#.#.",
    ".##....E",
)


def generate_layout(size: int, rng: random.Random) -> list[str]:
    """A perfect maze (one path between any two open cells) by a seeded depth-first search.

    Rooms sit at even coordinates; the start is the top-left room and the exit the bottom-right
    one (with an even size the last row and column stay walls)."""
    if size < 3:
        raise ValueError(f"size must be at least 3, got {size}")
    grid = [["#"] * size for _ in range(size)]
    grid[0][0] = "."
    stack = [(0, 0)]
    while stack:
        r, c = stack[-1]
        options = [
            (r + 2 * dr, c + 2 * dc)
            for dr, dc in MOVES
            if 0 <= r + 2 * dr < size
            and 0 <= c + 2 * dc < size
            and grid[r + 2 * dr][c + 2 * dc] == "#"
        ]
        if not options:
            stack.pop()
            continue
        nr, nc = rng.choice(options)
        grid[(r + nr) // 2][(c + nc) // 2] = "."
        grid[nr][nc] = "."
        stack.append((nr, nc))
    last = size - 1 if size % 2 else size - 2
    grid[0][0] = "S"
    grid[last][last] = "E"
    return ["".join(row) for row in grid]


def _find(layout: list[str], mark: str) -> list[int]:
    for r, row in enumerate(layout):
        c = row.find(mark)
        if c >= 0:
            return [r, c]
    raise ValueError(f"the layout has no {mark!r} cell")


class MazeEnvironment(Environment[MazeAction, MazeObservation, MazeState]):
    """The fixed 8x8 maze by default; `reset(seed=..., size=...)` generates a perfect maze,
    `reset(layout=[...])` plays a given one. With `max_steps` the episode is also cut after that
    many actions."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUNS_ON_EVENT_LOOP = True  # a step is a few microseconds of list lookups

    def __init__(self, max_steps: int | None = None) -> None:
        super().__init__()
        self._max_steps = max_steps
        self._walls: set[tuple[int, int]] = set()
        self._visited: set[tuple[int, int]] = set()
        self._load(list(DEFAULT_LAYOUT), seed=None, generated=False, max_steps=max_steps)

    def _load(
        self,
        layout: list[str],
        seed: int | None,
        generated: bool,
        max_steps: int | None,
        episode_id: str | None = None,
        start_cell: list[int] | None = None,
    ) -> None:
        if not layout or any(len(row) != len(layout[0]) for row in layout):
            raise ValueError("the layout must be a non-empty list of equally long strings")
        start, exit_ = _find(layout, "S"), _find(layout, "E")
        if start_cell is not None:  # OpenEnv's [col, row]
            col, row = (int(v) for v in start_cell)
            if not (0 <= row < len(layout) and 0 <= col < len(layout[0])):
                raise ValueError(f"start_cell {[col, row]} is outside the maze")
            if layout[row][col] == "#" or [row, col] == exit_:
                raise ValueError(f"start_cell {[col, row]} must be an open cell, not the exit")
            start = [row, col]
        self._rows, self._cols = len(layout), len(layout[0])
        self._walls = {
            (r, c) for r, row in enumerate(layout) for c, ch in enumerate(row) if ch == "#"
        }
        self._visited = {tuple(start)}
        self._previous = list(start)
        self._state = MazeState(
            episode_id=episode_id or str(uuid4()),
            seed=seed,
            size=max(self._rows, self._cols),
            generated=generated,
            layout=layout,
            position=start,
            exit=exit_,
            current_position=start[::-1],
            exit_cell=exit_[::-1],
            max_steps=max_steps,
        )

    def _open(self, r: int, c: int) -> bool:
        return 0 <= r < self._rows and 0 <= c < self._cols and (r, c) not in self._walls

    def legal_actions(self) -> list[int]:
        r, c = self._state.position
        return [a for a, (dr, dc) in enumerate(MOVES) if self._open(r + dr, c + dc)]

    def render(self) -> list[str]:
        st = self._state
        rows = [list(row.replace("S", ".")) for row in st.layout]
        rows[st.position[0]][st.position[1]] = "A"
        return ["".join(row) for row in rows]

    def _observe(self, reward: float, event: str = "", message: str = "") -> MazeObservation:
        st = self._state
        return MazeObservation(
            legal_actions=[] if st.done else self.legal_actions(),
            current_position=st.position[::-1],
            previous_position=self._previous[::-1],
            position=list(st.position),
            exit=list(st.exit),
            grid=self.render(),
            event=event,
            status=st.status,
            message=message,
            reward=reward,
            done=st.done,
            # What OpenEnv's maze puts in the metadata; positions are [col, row] there.
            metadata={
                "maze": [[int(ch == "#") for ch in row] for row in st.layout],
                "status": st.status,
                "exit_cell": st.exit[::-1],
                "step": st.step_count,
            },
        )

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        size: int | None = None,
        generate: bool = False,
        layout: list[str] | None = None,
        max_steps: int | None = None,
        start_cell: list[int] | tuple[int, int] | None = None,
        **kwargs: Any,
    ) -> MazeObservation:
        max_steps = self._max_steps if max_steps is None else int(max_steps)
        if layout is not None:
            rows, generated = [str(row) for row in layout], False
        elif size is not None or generate:
            rows = generate_layout(int(size or 8), random.Random(seed))
            generated = True
        else:
            rows, generated = list(DEFAULT_LAYOUT), False
        start = None if start_cell is None else list(start_cell)
        self._load(rows, seed, generated, max_steps, episode_id, start)
        return self._observe(reward=0.0, message="find the exit E")

    def step(
        self, action: MazeAction, timeout_s: float | None = None, **kwargs: Any
    ) -> MazeObservation:
        st = self._state
        if st.done:
            raise ValueError("The episode is over: call reset()")
        dr, dc = MOVES[action.action]
        r, c = st.position[0] + dr, st.position[1] + dc
        st.step_count += 1
        self._previous = list(st.position)
        if not self._open(r, c):
            st.wall_bumps += 1
            reward, event = WALL_REWARD, "wall"
        else:
            st.position = [r, c]
            if [r, c] == st.exit:
                st.solved = True
                reward, event = EXIT_REWARD, "exit"
            elif (r, c) in self._visited:
                reward, event = REVISIT_REWARD, "revisit"
            else:
                reward, event = MOVE_REWARD, "move"
            self._visited.add((r, c))
            st.visited = len(self._visited)
        st.total_reward += reward
        st.current_position = st.position[::-1]
        message = ""
        if st.solved:
            st.status, message = "win", "reached the exit"
        elif st.total_reward < LOSE_PER_CELL * self._rows * self._cols:
            st.status, message = "lose", "lost: the penalties passed the limit"
        elif st.max_steps is not None and st.step_count >= st.max_steps:
            message = "out of steps"
        st.done = st.status != "playing" or bool(message)
        return self._observe(reward=reward, event=event, message=message)

    @property
    def state(self) -> MazeState:
        return self._state
