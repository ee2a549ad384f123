"""Playground apps for the tests: the counter with an API key and a custom renderer, the same
app behind a path prefix (as a proxy that strips `/space` and sets `root_path` serves it), and
an environment whose action has enums, bounds and a nested model."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from openenv.core.env_server import Action, Environment, Observation, State, create_app
from tests.apps.counter import CounterAction, CounterEnv, CounterObservation

KEY = "playground-key"
PREFIX = "/space"
RENDERER = Path(__file__).with_name("counter_renderer.js")

keyed = create_app(
    CounterEnv,
    CounterAction,
    CounterObservation,
    env_name="counter",
    api_key=KEY,
    web_interface=True,
    web_renderer=RENDERER,
)


def behind_prefix(app: ASGIApp, prefix: str) -> ASGIApp:
    async def proxied(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            path = scope["path"]
            if path == "/health":  # the test harness's readiness probe
                pass
            elif path == prefix or path.startswith(prefix + "/"):
                scope = {**scope, "root_path": prefix, "path": path[len(prefix) :] or "/"}
            else:
                scope = {**scope, "path": "/not-behind-the-prefix"}
        await app(scope, receive, send)

    return proxied


prefixed = behind_prefix(keyed, PREFIX)


class Point(BaseModel):
    x: int = Field(ge=0, le=9)
    y: int = Field(ge=0, le=9)


class MoveAction(Action):
    """An action with every kind of field the form builder knows."""

    direction: Literal["north", "south", "east", "west"]
    speed: float = Field(1.0, ge=0.0, le=5.0)
    target: Point
    sprint: bool = False
    tags: list[str] = []
    note: str | None = None


class MoveObservation(Observation):
    received: dict[str, Any] = {}
    board: list[list[str]] = []


class MoveEnv(Environment[MoveAction, MoveObservation, State]):
    """Echoes the action it got, so the test sees what the form sent."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id="moves")

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> MoveObservation:
        self._state = State(episode_id=episode_id or "moves")
        return MoveObservation(board=[["."] * 3 for _ in range(3)], reward=0.0)

    def step(
        self, action: MoveAction, timeout_s: float | None = None, **kwargs: Any
    ) -> MoveObservation:
        self._state.step_count += 1
        board = [["."] * 3 for _ in range(3)]
        board[min(action.target.y, 2)][min(action.target.x, 2)] = "X"
        received = action.model_dump(exclude={"metadata"})
        return MoveObservation(received=received, board=board, reward=action.speed)

    @property
    def state(self) -> State:
        return self._state


moves = create_app(MoveEnv, MoveAction, MoveObservation, env_name="moves", web_interface=True)

#: Built with OpenEnv's Gradio options, as an environment written for OpenEnv would be.
titled = create_app(
    CounterEnv,
    CounterAction,
    CounterObservation,
    env_name="counter",
    web_interface=True,
    title_override="Counter by hand",
    gradio_builder=lambda *args: None,
    custom_tab_name="Board",
    custom_tab_primary=True,
    show_default_tab=False,
)
