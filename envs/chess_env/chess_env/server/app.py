"""ASGI app of the chess environment: `python -m chess_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import ChessAction, ChessObservation
from .chess_environment import ChessEnvironment

app = create_app(ChessEnvironment, ChessAction, ChessObservation, env_name="chess_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("chess_env.server.app:app", argv)


if __name__ == "__main__":
    main()
