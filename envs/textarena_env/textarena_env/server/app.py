"""ASGI app of the TextArena environment: `python -m textarena_env.server.app --port 8000`.

The default game comes from `TEXTARENA_ENV_ID` (default `Wordle-v0`); `reset(env_id=...)`
picks another per episode."""

from __future__ import annotations

import argparse
import os

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import run_server

from ..models import TextArenaAction, TextArenaObservation
from .textarena_environment import TextArenaEnvironment

app = create_app(
    TextArenaEnvironment, TextArenaAction, TextArenaObservation, env_name="textarena_env"
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the TextArena environment.")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--env-id", default=None, help="sets TEXTARENA_ENV_ID")
    args = parser.parse_args(argv)
    if args.env_id:
        os.environ["TEXTARENA_ENV_ID"] = args.env_id
    run_server("textarena_env.server.app:app", host=args.host, port=args.port, workers=args.workers)


if __name__ == "__main__":
    main()
