"""ASGI app of the maze environment: `python -m maze_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import MazeAction, MazeObservation
from .maze_environment import MazeEnvironment

app = create_app(MazeEnvironment, MazeAction, MazeObservation, env_name="maze_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("maze_env.server.app:app", argv)


if __name__ == "__main__":
    main()
