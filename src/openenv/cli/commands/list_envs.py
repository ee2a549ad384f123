"""`openenv list`: the environments installed in this Python, found by discovery."""

from __future__ import annotations

import json
import warnings

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._output import console, labelled


def register(app: typer.Typer) -> None:
    @app.command("list")
    def list_envs(
        as_json: bool = typer.Option(False, "--json", help="Print the list as JSON on stdout."),
    ) -> None:
        """List installed environment packages (openenv-* distributions)."""
        from openenv.auto import DiscoveryWarning, discover

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DiscoveryWarning)
            found = discover()
        infos = sorted(found.environments.values(), key=lambda info: info.env_key)
        if as_json:
            typer.echo(json.dumps([info.to_dict() for info in infos], indent=2))
        else:
            table = Table("name", "package", "version", "client", "description", box=None)
            for info in infos:
                client = info.client.rpartition(":")[2]
                # Cells are plain text: a description may hold brackets, which markup eats.
                cells = (info.env_key, info.distribution, info.version, client, info.description)
                table.add_row(*(Text(cell) for cell in cells))
            Console(highlight=False).print(table)
        for warning in caught:
            if issubclass(warning.category, DiscoveryWarning):
                console.print(labelled("skipped:", "yellow", str(warning.message)))
