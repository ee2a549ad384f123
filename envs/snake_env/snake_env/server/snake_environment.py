"""Pure-Python snake with the rules, rewards and observation encoding of OpenEnv's `snake_env`
(marlenv's Snake, one snake): no gym or marlenv needed.

Rewards come from `reward_dict` (OpenEnv's default: fruit 1.0, lose -1.0, time 0.001 per step
alive, win 100.0 for filling the board, kill 0.0)."""

from __future__ import annotations

import random
from collections import deque
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Environment
from openenv.core.errors import InvalidActionError

from ..models import Direction, SnakeAction, SnakeObservation, SnakeState

#: clockwise, so a left turn is one step back and a right turn one step on
HEADINGS: tuple[Direction, ...] = ("UP", "RIGHT", "DOWN", "LEFT")
DELTAS: dict[str, tuple[int, int]] = {
    "UP": (-1, 0),
    "RIGHT": (0, 1),
    "DOWN": (1, 0),
    "LEFT": (0, -1),
}
#: the `human` observer's actions: 0 keeps the heading
HUMAN_ACTIONS: dict[int, Direction] = {1: "LEFT", 2: "RIGHT", 3: "DOWN", 4: "UP"}
#: OpenEnv's default rewards
DEFAULT_REWARDS: dict[str, float] = {
    "fruit": 1.0,
    "kill": 0.0,
    "lose": -1.0,
    "win": 100.0,
    "time": 0.001,
}
#: cell codes of `grid` (marlenv's)
EMPTY, FRUIT, WALL, TAIL, BODY, HEAD = range(6)
CHANNELS = 8


def turn(heading: Direction, action: SnakeAction, observer: str = "snake") -> Direction:
    """The new heading: the absolute heading asked for unless it reverses the snake, else the
    relative turn (the `snake` observer)."""
    index = HEADINGS.index(heading)
    wanted = action.direction
    if wanted is None and observer == "human":
        wanted = HUMAN_ACTIONS.get(action.action)
    if wanted is not None:
        if HEADINGS.index(wanted) == (index + 2) % 4:
            return heading
        return wanted
    if observer == "snake" and action.action == 1:
        return HEADINGS[(index - 1) % 4]
    if observer == "snake" and action.action == 2:
        return HEADINGS[(index + 1) % 4]
    return heading


class SnakeEnvironment(Environment[SnakeAction, SnakeObservation, SnakeState]):
    """A `height` x `width` grid (default 20 x 20, as OpenEnv's) whose border is wall; the snake
    starts with `snake_length` cells in the middle heading right, and one fruit is placed on a
    free cell by an RNG seeded with `reset(seed=...)`. The episode ends on death (wall or body;
    the cell the tail leaves is free), on filling the board, or after `max_episode_steps`."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUNS_ON_EVENT_LOOP = True  # a step is well under a millisecond of pure Python

    def __init__(
        self,
        height: int = 20,
        width: int = 20,
        snake_length: int = 3,
        vision_range: int | None = None,
        observer: str = "snake",
        max_episode_steps: int = 1000,
        reward_dict: dict[str, float] | None = None,
        max_steps: int | None = None,
    ) -> None:
        super().__init__()
        if observer not in ("snake", "human"):
            raise ValueError(f"observer must be 'snake' or 'human', got {observer!r}")
        if vision_range is not None and vision_range < 1:
            raise ValueError(f"vision_range must be at least 1, got {vision_range}")
        self._defaults = (width, height, max_episode_steps if max_steps is None else max_steps)
        self._snake_length = snake_length
        self._vision_range = vision_range
        self._observer = observer
        self._rewards = {**DEFAULT_REWARDS, **(reward_dict or {})}
        self._rng = random.Random()
        self._body: deque[tuple[int, int]] = deque()
        self._occupied: set[tuple[int, int]] = set()
        self._episode_score = 0.0
        self.reset()

    # -- board ------------------------------------------------------------------------------

    def _inside(self, r: int, c: int) -> bool:
        """Inside the wall."""
        st = self._state
        return 0 < r < st.height - 1 and 0 < c < st.width - 1

    def _place_fruit(self) -> list[int] | None:
        st = self._state
        free = [
            (r, c)
            for r in range(1, st.height - 1)
            for c in range(1, st.width - 1)
            if (r, c) not in self._occupied
        ]
        if not free:
            return None
        return list(self._rng.choice(free))

    def codes(self) -> list[list[int]]:
        """The grid as cell codes (OpenEnv's `grid`)."""
        st = self._state
        rows = [
            [
                WALL if r in (0, st.height - 1) or c in (0, st.width - 1) else EMPTY
                for c in range(st.width)
            ]
            for r in range(st.height)
        ]
        if st.fruit is not None:
            rows[st.fruit[0]][st.fruit[1]] = FRUIT
        last = len(self._body) - 1
        for i, (r, c) in enumerate(self._body):
            if self._inside(r, c):
                rows[r][c] = HEAD if i == 0 else TAIL if i == last else BODY
        return rows

    def render(self, codes: list[list[int]] | None = None) -> list[str]:
        symbols = {EMPTY: ".", FRUIT: "*", WALL: "#", TAIL: "o", BODY: "o", HEAD: "H"}
        return ["".join(symbols[v] for v in row) for row in codes or self.codes()]

    def encode(self, codes: list[list[int]]) -> list[list[list[float]]]:
        """OpenEnv's `observation`: one-hot channels per cell, cropped around the head when
        `vision_range` is set."""
        channel = {FRUIT: 0, WALL: 1, TAIL: 5, BODY: 6, HEAD: 7}

        def cell(r: int, c: int) -> list[float]:
            out = [0.0] * CHANNELS
            if 0 <= r < len(codes) and 0 <= c < len(codes[0]) and codes[r][c] != EMPTY:
                out[channel[codes[r][c]]] = 1.0
            return out

        v = self._vision_range
        if v is None:
            return [[cell(r, c) for c in range(len(codes[0]))] for r in range(len(codes))]
        hr, hc = self._body[0]
        return [[cell(r, c) for c in range(hc - v, hc + v + 1)] for r in range(hr - v, hr + v + 1)]

    def _sync_state(self) -> None:
        self._state.snake = [list(cell) for cell in self._body]

    def _observe(
        self, reward: float | None, done: bool = False, event: str = "", message: str = ""
    ) -> SnakeObservation:
        st = self._state
        codes = self.codes()
        return SnakeObservation(
            grid=codes,
            observation=self.encode(codes),
            episode_score=self._episode_score,
            episode_steps=st.step_count,
            episode_fruits=st.score,
            episode_kills=0,
            alive=st.alive,
            board=self.render(codes),
            score=st.score,
            length=len(self._body),
            direction=st.direction,
            head=list(self._body[0]),
            fruit=None if st.fruit is None else list(st.fruit),
            width=st.width,
            height=st.height,
            event=event,
            message=message,
            reward=reward,
            done=done,
        )

    # -- the API ----------------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        width: int | None = None,
        height: int | None = None,
        max_steps: int | None = None,
        **kwargs: Any,
    ) -> SnakeObservation:
        dw, dh, dmax = self._defaults
        width = dw if width is None else int(width)
        height = dh if height is None else int(height)
        length = self._snake_length
        if length < 2 or width < length + 3 or height < 4:
            raise ValueError(
                f"a grid of {width}x{height} (with its wall) is too small for a snake of "
                f"{length}: it needs a width of at least {length + 3} and a height of 4"
            )
        if max_steps is None:
            max_steps = kwargs.get("max_episode_steps", dmax)
        self._rng = random.Random(seed)
        row, col = height // 2, max(width // 2, length)
        self._body = deque((row, col - i) for i in range(length))
        self._occupied = set(self._body)
        self._episode_score = 0.0
        self._state = SnakeState(
            episode_id=episode_id or str(uuid4()),
            seed=seed,
            width=width,
            height=height,
            observer=self._observer,  # type: ignore[arg-type]
            max_steps=int(max_steps),  # type: ignore[arg-type]
        )
        self._state.fruit = self._place_fruit()
        self._sync_state()
        # OpenEnv's reset observation carries reward 0.0
        return self._observe(0.0, message="eat the fruit *")

    def step(
        self, action: SnakeAction, timeout_s: float | None = None, **kwargs: Any
    ) -> SnakeObservation:
        st = self._state
        if not st.alive or st.fruit is None or st.step_count >= st.max_steps:
            raise ValueError("The episode is over: call reset()")
        if st.observer == "snake" and action.direction is None and action.action > 2:
            message = f"action {action.action} is not a turn: 0 straight on, 1 left, 2 right"
            raise InvalidActionError(
                message, errors=[{"loc": ["action"], "msg": message, "type": "value_error"}]
            )
        rewards = self._rewards
        st.direction = turn(st.direction, action, st.observer)
        dr, dc = DELTAS[st.direction]
        r, c = self._body[0][0] + dr, self._body[0][1] + dc
        st.step_count += 1
        eats = [r, c] == st.fruit
        tail = self._body[-1]
        # The tail moves away this step unless the snake grows, so the head may take its cell.
        blocked = (r, c) in self._occupied and (eats or (r, c) != tail)
        if not self._inside(r, c) or blocked:
            st.alive = False
            reward = rewards["lose"]
            return self._finish(reward, True, "death", "the snake died")
        if not eats:
            self._occupied.discard(self._body.pop())
        self._body.appendleft((r, c))
        self._occupied.add((r, c))
        reward = rewards["time"]
        event = "move"
        if eats:
            st.score += 1
            st.fruit = self._place_fruit()
            reward += rewards["fruit"]
            event = "fruit"
        self._sync_state()
        if st.fruit is None:
            return self._finish(reward + rewards["win"], True, "win", "the snake fills the board")
        if st.step_count >= st.max_steps:
            return self._finish(reward, True, "timeout", "out of steps")
        return self._finish(reward, False, event)

    def _finish(self, reward: float, done: bool, event: str, message: str = "") -> SnakeObservation:
        self._state.total_reward += reward
        self._episode_score += reward
        return self._observe(reward, done, event, message)

    @property
    def state(self) -> SnakeState:
        return self._state
