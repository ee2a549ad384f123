"""ASGI app of the math environment: `python -m math_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import MathAction, MathObservation
from .math_environment import MathEnvironment

app = create_app(MathEnvironment, MathAction, MathObservation, env_name="math_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("math_env.server.app:app", argv)


if __name__ == "__main__":
    main()
