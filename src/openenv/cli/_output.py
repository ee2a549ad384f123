"""Console output shared by the commands: rich on stderr for progress, plain stdout for results."""

from __future__ import annotations

from typing import NoReturn, Optional

import typer
from rich.console import Console

# Progress and errors go to stderr so that stdout stays parseable (`validate --json`).
console = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, hint: Optional[str] = None, code: int = 1) -> NoReturn:
    """Print what went wrong and what to do about it, then exit with `code`."""
    console.print(f"[bold red]error:[/] {message}")
    if hint:
        console.print(f"[dim]hint:[/] {hint}")
    raise typer.Exit(code)


def success(message: str) -> None:
    console.print(f"[green]✓[/] {message}")
