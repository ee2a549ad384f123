"""ASGI app of the coding environment: `python -m coding_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import CodeAction, CodeObservation
from .coding_environment import CodingEnvironment

app = create_app(CodingEnvironment, CodeAction, CodeObservation, env_name="coding_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("coding_env.server.app:app", argv)


if __name__ == "__main__":
    main()
