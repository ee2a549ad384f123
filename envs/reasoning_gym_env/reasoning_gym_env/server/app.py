"""ASGI app of the reasoning gym environment:
`python -m reasoning_gym_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import ReasoningGymAction, ReasoningGymObservation
from .reasoning_gym_environment import ReasoningGymEnvironment

app = create_app(
    ReasoningGymEnvironment,
    ReasoningGymAction,
    ReasoningGymObservation,
    env_name="reasoning_gym_env",
)


def main(argv: list[str] | None = None) -> None:
    serve_main("reasoning_gym_env.server.app:app", argv)


if __name__ == "__main__":
    main()
