"""ASGI app of the OpenSpiel environment: `python -m openspiel_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import OpenSpielAction, OpenSpielObservation
from .openspiel_environment import OpenSpielEnvironment

app = create_app(
    OpenSpielEnvironment, OpenSpielAction, OpenSpielObservation, env_name="openspiel_env"
)


def main(argv: list[str] | None = None) -> None:
    serve_main("openspiel_env.server.app:app", argv)


if __name__ == "__main__":
    main()
