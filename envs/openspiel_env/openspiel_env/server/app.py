"""ASGI app of the OpenSpiel environment: `python -m openspiel_env.server.app --port 8000`."""

from __future__ import annotations

import argparse

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import run_server

from ..models import OpenSpielAction, OpenSpielObservation
from .openspiel_environment import OpenSpielEnvironment

app = create_app(
    OpenSpielEnvironment, OpenSpielAction, OpenSpielObservation, env_name="openspiel_env"
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the OpenSpiel environment.")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    run_server("openspiel_env.server.app:app", host=args.host, port=args.port, workers=args.workers)


if __name__ == "__main__":
    main()
