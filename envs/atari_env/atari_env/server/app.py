"""ASGI app of the Atari environment: `python -m atari_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import AtariAction, AtariObservation
from .atari_environment import AtariEnvironment

app = create_app(AtariEnvironment, AtariAction, AtariObservation, env_name="atari_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("atari_env.server.app:app", argv)


if __name__ == "__main__":
    main()
