"""ASGI app of the terminal environment: `python -m terminal_env.server.app --port 8000`.

TERMINAL_ENV_TASKS (os.pathsep-separated folders) adds task folders to the shipped ones."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import TerminalAction, TerminalObservation
from .terminal_environment import TerminalEnvironment

app = create_app(TerminalEnvironment, TerminalAction, TerminalObservation, env_name="terminal_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("terminal_env.server.app:app", argv)


if __name__ == "__main__":
    main()
