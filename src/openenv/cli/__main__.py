"""`openenv`: the command line."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from openenv import __version__, settings

from .commands import (
    build,
    collect,
    fork,
    init,
    list_envs,
    model,
    ps,
    push,
    serve,
    skills,
    validate,
)

# Help as click formats it (rich_markup_mode=None): typer's rich help panels give every flag a
# `<bool>` type column (typer 0.29) and read help texts as rich markup, which eats anything in
# brackets (`openenv[docker]`). Plain help shows flags as `--reload / --no-reload`.
app = typer.Typer(
    name="openenv",
    help="Build, serve and use agentic execution environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
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


for _command in (init, serve, validate, build, push, fork, skills, list_envs, ps, collect, model):
    _command.register(app)


#: Set to 1 to see the traceback of an unexpected error instead of its one-line summary.
DEBUG_ENV = settings.DEBUG.name


def _debug() -> bool:
    return settings.DEBUG.get() is True


def main() -> None:
    """The console script: an unexpected exception becomes one `error:` line and exit code 1
    (as in OpenEnv); OPENENV_DEBUG=1 shows its traceback instead."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        if _debug():
            raise
        from openenv.core.errors import exception_message

        message = " ".join(exception_message(exc).split())  # one line, whatever the text
        print(f"error: {message} (set {DEBUG_ENV}=1 for the traceback)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
