"""The terminal environment as MCP tools (`bash`, `submit`): `python -m
terminal_env.server.mcp_app --port 8000`. The plain app (`terminal_env.server.app`, one
`TerminalAction` per step) is the primary interface."""

from __future__ import annotations

from openenv.core.env_server import CallToolAction, CallToolObservation, create_app
from openenv.core.env_server.runner import serve_main

from .tools_environment import TerminalToolEnvironment

app = create_app(
    TerminalToolEnvironment, CallToolAction, CallToolObservation, env_name="terminal_env"
)


def main(argv: list[str] | None = None) -> None:
    serve_main("terminal_env.server.mcp_app:app", argv)


if __name__ == "__main__":
    main()
