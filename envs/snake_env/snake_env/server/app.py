"""ASGI app of the snake environment: `python -m snake_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import SnakeAction, SnakeObservation
from .snake_environment import SnakeEnvironment

app = create_app(SnakeEnvironment, SnakeAction, SnakeObservation, env_name="snake_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("snake_env.server.app:app", argv)


if __name__ == "__main__":
    main()
