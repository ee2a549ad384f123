"""A 5x5 grid world with OpenEnv's rules: -0.1 per move, +1.0 and done at the goal, moves clamped
at the border."""

from __future__ import annotations

import random
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Environment

from ..models import GridWorldAction, GridWorldObservation, GridWorldState

MOVES = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}
STEP_REWARD = -0.1
GOAL_REWARD = 1.0


class GridWorldEnvironment(Environment[GridWorldAction, GridWorldObservation, GridWorldState]):
    """Start at `[0, 0]`, reach `[size-1, size-1]`; with `max_steps` the episode is also cut
    after that many moves."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUNS_ON_EVENT_LOOP = True  # a step is a few microseconds of arithmetic

    def __init__(self, size: int = 5, max_steps: int | None = None) -> None:
        super().__init__()
        self._size = size
        self._max_steps = max_steps
        self._state = self._new_state(str(uuid4()), None, size, [0, 0], False, max_steps)

    @staticmethod
    def _new_state(
        episode_id: str,
        seed: int | None,
        size: int,
        start: list[int],
        random_start: bool,
        max_steps: int | None,
    ) -> GridWorldState:
        goal = [size - 1, size - 1]
        return GridWorldState(
            episode_id=episode_id,
            agent_x=start[0],
            agent_y=start[1],
            goal_x=goal[0],
            goal_y=goal[1],
            grid_size=size,
            seed=seed,
            size=size,
            position=start,
            goal=goal,
            random_start=random_start,
            max_steps=max_steps,
        )

    def _observe(
        self, reward: float, done: bool = False, bumped: bool = False, message: str = ""
    ) -> GridWorldObservation:
        st = self._state
        return GridWorldObservation(
            x=st.position[0],
            y=st.position[1],
            position=list(st.position),
            goal=list(st.goal),
            size=st.size,
            bumped=bumped,
            message=message,
            reward=reward,
            done=done,
        )

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        random_start: bool = False,
        size: int | None = None,
        max_steps: int | None = None,
        **kwargs: Any,
    ) -> GridWorldObservation:
        size = self._size if size is None else int(size)
        if size < 2:
            raise ValueError(f"size must be at least 2, got {size}")
        max_steps = self._max_steps if max_steps is None else int(max_steps)
        goal = [size - 1, size - 1]
        start = [0, 0]
        if random_start:
            rng = random.Random(seed)
            cells = [[r, c] for r in range(size) for c in range(size) if [r, c] != goal]
            start = rng.choice(cells)
        self._state = self._new_state(
            episode_id or str(uuid4()), seed, size, start, random_start, max_steps
        )
        return self._observe(reward=0.0, message=f"reach {goal} from {start}")

    def step(
        self, action: GridWorldAction, timeout_s: float | None = None, **kwargs: Any
    ) -> GridWorldObservation:
        st = self._state
        if st.reached_goal or (st.max_steps is not None and st.step_count >= st.max_steps):
            raise ValueError("The episode is over: call reset()")
        assert action.action is not None  # the model fills it from `action` or `direction`
        dr, dc = MOVES[action.action.value]
        row, col = st.position
        new = [min(max(row + dr, 0), st.size - 1), min(max(col + dc, 0), st.size - 1)]
        bumped = new == st.position
        st.position = new
        st.agent_x, st.agent_y = new
        st.step_count += 1
        st.episode_steps = st.step_count
        if new == st.goal:
            st.reached_goal = True
            reward, done, message = GOAL_REWARD, True, "reached the goal"
        else:
            reward = STEP_REWARD
            done = st.max_steps is not None and st.step_count >= st.max_steps
            message = "out of steps" if done else ("bumped into the border" if bumped else "")
        st.total_reward += reward
        return self._observe(reward=reward, done=done, bumped=bumped, message=message)

    @property
    def state(self) -> GridWorldState:
        return self._state
