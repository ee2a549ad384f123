"""Pure-Python snake: +1 per fruit, -1 and done on death, -0.01 per other step."""

from __future__ import annotations

import random
from collections import deque
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Environment

from ..models import Direction, SnakeAction, SnakeObservation, SnakeState

#: clockwise, so a left turn is one step back and a right turn one step on
HEADINGS: tuple[Direction, ...] = ("UP", "RIGHT", "DOWN", "LEFT")
DELTAS: dict[str, tuple[int, int]] = {
    "UP": (-1, 0),
    "RIGHT": (0, 1),
    "DOWN": (1, 0),
    "LEFT": (0, -1),
}
FRUIT_REWARD = 1.0
DEATH_REWARD = -1.0
STEP_REWARD = -0.01


def turn(heading: Direction, action: SnakeAction) -> Direction:
    """The new heading: the absolute `direction` unless it reverses the snake, else the turn."""
    index = HEADINGS.index(heading)
    if action.direction is not None:
        if HEADINGS.index(action.direction) == (index + 2) % 4:
            return heading
        return action.direction
    if action.action == 1:
        return HEADINGS[(index - 1) % 4]
    if action.action == 2:
        return HEADINGS[(index + 1) % 4]
    return heading


class SnakeEnvironment(Environment[SnakeAction, SnakeObservation, SnakeState]):
    """A `width` x `height` board; the snake starts with length 3 in the middle heading right.
    Fruit is placed on a free cell by an RNG seeded with `reset(seed=...)`; the episode ends on
    death, on filling the board, or after `max_steps` steps."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUNS_ON_EVENT_LOOP = True  # a step is microseconds of pure Python on a small board

    def __init__(self, width: int = 10, height: int = 10, max_steps: int = 1000) -> None:
        super().__init__()
        self._defaults = (width, height, max_steps)
        self._rng = random.Random()
        self._body: deque[tuple[int, int]] = deque()
        self._occupied: set[tuple[int, int]] = set()
        self.reset()

    def _place_fruit(self) -> list[int] | None:
        st = self._state
        free = [
            (r, c)
            for r in range(st.height)
            for c in range(st.width)
            if (r, c) not in self._occupied
        ]
        if not free:
            return None
        return list(self._rng.choice(free))

    def render(self) -> list[str]:
        st = self._state
        rows = [["."] * st.width for _ in range(st.height)]
        if st.fruit is not None:
            rows[st.fruit[0]][st.fruit[1]] = "*"
        for i, (r, c) in enumerate(self._body):
            if 0 <= r < st.height and 0 <= c < st.width:
                rows[r][c] = "H" if i == 0 else "o"
        return ["".join(row) for row in rows]

    def _sync_state(self) -> None:
        self._state.snake = [list(cell) for cell in self._body]

    def _observe(
        self, reward: float | None = None, done: bool = False, event: str = "", message: str = ""
    ) -> SnakeObservation:
        st = self._state
        return SnakeObservation(
            grid=self.render(),
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
        if width < 4 or height < 2:
            raise ValueError(f"the board must be at least 4 wide and 2 high, got {width}x{height}")
        self._rng = random.Random(seed)
        row, col = height // 2, width // 2
        self._body = deque((row, col - i) for i in range(3))
        self._occupied = set(self._body)
        self._state = SnakeState(
            episode_id=episode_id or str(uuid4()),
            seed=seed,
            width=width,
            height=height,
            max_steps=dmax if max_steps is None else int(max_steps),
        )
        self._state.fruit = self._place_fruit()
        self._sync_state()
        return self._observe(message="eat the fruit *")

    def step(
        self, action: SnakeAction, timeout_s: float | None = None, **kwargs: Any
    ) -> SnakeObservation:
        st = self._state
        if not st.alive or st.fruit is None or st.step_count >= st.max_steps:
            raise ValueError("The episode is over: call reset()")
        st.direction = turn(st.direction, action)
        dr, dc = DELTAS[st.direction]
        r, c = self._body[0][0] + dr, self._body[0][1] + dc
        st.step_count += 1
        eats = [r, c] == st.fruit
        tail = self._body[-1]
        # The tail moves away this step unless the snake grows, so the head may take its cell.
        blocked = (r, c) in self._occupied and (eats or (r, c) != tail)
        if not (0 <= r < st.height and 0 <= c < st.width) or blocked:
            st.alive = False
            st.total_reward += DEATH_REWARD
            return self._observe(DEATH_REWARD, True, "death", "the snake died")
        if not eats:
            self._occupied.discard(self._body.pop())
        self._body.appendleft((r, c))
        self._occupied.add((r, c))
        if eats:
            st.score += 1
            st.fruit = self._place_fruit()
            reward, event = FRUIT_REWARD, "fruit"
        else:
            reward, event = STEP_REWARD, "move"
        self._sync_state()
        st.total_reward += reward
        if st.fruit is None:
            return self._observe(reward, True, "win", "the snake fills the board")
        if st.step_count >= st.max_steps:
            return self._observe(reward, True, "timeout", "out of steps")
        return self._observe(reward, False, event)

    @property
    def state(self) -> SnakeState:
        return self._state
