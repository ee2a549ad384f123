"""`openenv`: the command line."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from openenv import __version__

from .commands import build, fork, init, list_envs, ps, push, serve, skills, validate

app = typer.Typer(
    name="openenv",
    help="Build, serve and use agentic execution environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


for _command in (init, serve, validate, build, push, fork, skills, list_envs, ps):
    _command.register(app)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
