"""`openenv serve`: run an environment locally from its folder, package or app import string."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from openenv.core.env_server.runner import DEFAULT_HOST
from openenv.core.manifest import DEFAULT_PORT

from .._output import console, fail


def resolve_app(target: str) -> tuple[str, Optional[Path]]:
    """The app import string for `target` and the folder to put on `sys.path`, if any; exits
    with a usage error when `target` names nothing servable."""
    from openenv.providers.spec import SpecError
    from openenv.providers.spec import resolve_app as resolve

    try:
        found = resolve(target)
    except SpecError as exc:
        fail(str(exc), "See `openenv list` for installed environments.", code=2)
    return found.app, found.root


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        target: str = typer.Argument(
            ".",
            help="Environment folder (default: the current one), installed environment name "
            "such as 'echo' (see `openenv list`), or app import string 'echo_env.server.app:app'.",
        ),
        host: str = typer.Option(
            DEFAULT_HOST, help="Interface to bind; 0.0.0.0 for every interface."
        ),
        port: int = typer.Option(DEFAULT_PORT, "--port", "-p", help="Port to listen on."),
        workers: int = typer.Option(1, min=1, help="Processes; sessions stay on their process."),
        reload: bool = typer.Option(False, help="Restart when source files change (development)."),
        web: Optional[bool] = typer.Option(
            None,
            "--web/--no-web",
            help="The /web playground, to play episodes in a browser (default: on if "
            "ENABLE_WEB_INTERFACE is true, as in OpenEnv).",
            show_default=False,
        ),
    ) -> None:
        """Serve an environment locally, without Docker."""
        from openenv.core.env_server.config import WEB_INTERFACE_ENV, web_interface_enabled
        from openenv.core.env_server.runner import run_server

        if web is not None:
            # Read where the app is built (create_app), in this process and in every worker.
            os.environ[WEB_INTERFACE_ENV] = "1" if web else "0"

        app_path, root = resolve_app(target)
        if root is not None:
            # The folder's package must import in this process, in reload and worker children too.
            sys.path.insert(0, str(root))
            os.environ["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p
            )
        url = f"http://{host}:{port}"
        console.print(f"Serving [bold]{escape(app_path)}[/] on {escape(url)}")
        if web_interface_enabled():
            console.print(f"Playground: {escape(url)}/web/")
        extra = {"reload_dirs": [str(root)]} if reload and root is not None else {}
        run_server(app_path, host=host, port=port, workers=workers, reload=reload, **extra)
