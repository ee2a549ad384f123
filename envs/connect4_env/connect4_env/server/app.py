"""ASGI app of the Connect Four environment: `python -m connect4_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import Connect4Action, Connect4Observation
from .connect4_environment import Connect4Environment

app = create_app(Connect4Environment, Connect4Action, Connect4Observation, env_name="connect4_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("connect4_env.server.app:app", argv)


if __name__ == "__main__":
    main()
