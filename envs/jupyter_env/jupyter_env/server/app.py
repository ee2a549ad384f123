"""ASGI app of the Jupyter environment: `python -m jupyter_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import JupyterAction, JupyterObservation
from .jupyter_environment import JupyterEnvironment

app = create_app(JupyterEnvironment, JupyterAction, JupyterObservation, env_name="jupyter_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("jupyter_env.server.app:app", argv)


if __name__ == "__main__":
    main()
