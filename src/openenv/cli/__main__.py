"""`openenv`: the command line."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from openenv import __version__

app = typer.Typer(
    name="openenv",
    help="Build, serve and use agentic execution environments.",
    no_args_is_help=True,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"openenv {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """openenv command line."""


@app.command()
def serve(
    app_path: str = typer.Argument(
        ..., help="The ASGI app to serve, as an import string: 'echo_env.server.app:app'."
    ),
    host: str = typer.Option("0.0.0.0", help="Interface to bind."),
    port: int = typer.Option(8000, help="Port to listen on."),
    workers: int = typer.Option(1, min=1, help="Processes; sessions stay on their process."),
    reload: bool = typer.Option(False, help="Restart when source files change (development)."),
) -> None:
    """Serve an environment app locally."""
    from openenv.core.env_server.runner import run_server

    if ":" not in app_path:
        typer.secho(
            f"'{app_path}' is not an import string; use 'package.module:app'.", fg="red", err=True
        )
        raise typer.Exit(2)
    run_server(app_path, host=host, port=port, workers=workers, reload=reload)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
