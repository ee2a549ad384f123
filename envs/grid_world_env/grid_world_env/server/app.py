"""ASGI app of the grid world environment: `python -m grid_world_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import GridWorldAction, GridWorldObservation
from .grid_world_environment import GridWorldEnvironment

app = create_app(
    GridWorldEnvironment, GridWorldAction, GridWorldObservation, env_name="grid_world_env"
)


def main(argv: list[str] | None = None) -> None:
    serve_main("grid_world_env.server.app:app", argv)


if __name__ == "__main__":
    main()
