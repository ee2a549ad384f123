"""Console output shared by the commands: rich on stderr for progress, plain stdout for results.

Messages are plain text, never rich markup: paths, hints and errors often hold brackets
(`pip install 'openenv[docker]'`), which markup would swallow. `fail`, `success` and `warn`
style their own label and print the message as it is; a command that prints with
`console.print` itself escapes what it did not write (`rich.markup.escape`).
"""

from __future__ import annotations

from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.text import Text

# Progress and errors go to stderr so that stdout stays parseable (`validate --json`).
console = Console(stderr=True, highlight=False, soft_wrap=True)


def labelled(label: str, style: str, message: str) -> Text:
    """`label` in `style`, then `message` as plain text (brackets and all)."""
    return Text.assemble((label, style), " ", message)


def fail(message: str, hint: Optional[str] = None, code: int = 1) -> NoReturn:
    """Print what went wrong and what to do about it, then exit with `code`."""
    console.print(labelled("error:", "bold red", message))
    if hint:
        console.print(labelled("hint:", "dim", hint))
    raise typer.Exit(code)


def success(message: str) -> None:
    console.print(labelled("✓", "green", message))


def warn(message: str) -> None:
    console.print(labelled("warning:", "yellow", message))
