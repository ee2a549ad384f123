"""ASGI app of the TextArena environment: `python -m textarena_env.server.app --port 8000`.

The default game comes from `TEXTARENA_ENV_ID` (default `Wordle-v0`); `reset(env_id=...)`
picks another per episode."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import TextArenaAction, TextArenaObservation
from .textarena_environment import TextArenaEnvironment

app = create_app(
    TextArenaEnvironment, TextArenaAction, TextArenaObservation, env_name="textarena_env"
)


def main(argv: list[str] | None = None) -> None:
    serve_main("textarena_env.server.app:app", argv, env_options={"--env-id": "TEXTARENA_ENV_ID"})


if __name__ == "__main__":
    main()
