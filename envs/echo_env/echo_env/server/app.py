"""ASGI app of the echo environment: `uvicorn echo_env.server.app:app` or
`python -m echo_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import CallToolAction, CallToolObservation, create_app
from openenv.core.env_server.runner import serve_main

from .echo_environment import EchoEnvironment

app = create_app(EchoEnvironment, CallToolAction, CallToolObservation, env_name="echo_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("echo_env.server.app:app", argv)


if __name__ == "__main__":
    main()
