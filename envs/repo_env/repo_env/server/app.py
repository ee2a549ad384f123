"""ASGI app of the repository environment: `uvicorn repo_env.server.app:app` or
`python -m repo_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import CallToolAction, CallToolObservation, create_app
from openenv.core.env_server.runner import serve_main

from .repo_environment import RepoEnvironment

app = create_app(RepoEnvironment, CallToolAction, CallToolObservation, env_name="repo_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("repo_env.server.app:app", argv)


if __name__ == "__main__":
    main()
