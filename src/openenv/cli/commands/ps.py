"""`openenv ps` and `openenv gc`: list and remove what providers started, on this machine.

Both walk every registered provider that can run here. A provider whose module is missing or
whose runtime is absent (no Docker engine, no bubblewrap) is skipped, and said so on stderr.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._output import console


@dataclass
class Found:
    """One resource and the provider class that can remove it."""

    provider: Any
    resource: Any


def _providers(verbose: bool) -> list[Any]:
    """Classes of the registered providers usable here, in registry order."""
    from openenv.providers import PROVIDERS, ProviderError, provider_class

    usable = []
    for name in PROVIDERS:
        try:
            cls = provider_class(name)
        except ImportError as exc:
            if verbose:
                console.print(f"[dim]{name}: skipped, cannot import it ({escape(str(exc))})[/]")
            continue
        try:
            cls.check_available()
        except ProviderError as exc:
            if verbose:
                console.print(f"[dim]{name}: skipped, {escape(str(exc))}[/]")
            continue
        usable.append(cls)
    return usable


def _unreadable_records() -> None:
    """Say which record files no provider could read (half-written, or from a newer openenv)."""
    from openenv.providers.ownership import LocalRecord, state_dir

    folder = state_dir()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            LocalRecord.from_json(path.read_text())
        except (OSError, ValueError, TypeError, KeyError) as exc:
            console.print(
                f"[yellow]unreadable record {escape(str(path))} ({escape(str(exc))}); "
                "delete it by hand if nothing runs from it[/]"
            )


def collect(verbose: bool = False) -> tuple[list[Found], int]:
    """Every resource of every usable provider, and how many providers could not be listed."""
    _unreadable_records()
    found: list[Found] = []
    failures = 0
    for cls in _providers(verbose):
        try:
            resources = cls.resources()
        except Exception as exc:  # one provider failing must not hide the others
            console.print(f"[yellow]{cls.name}: cannot list: {escape(str(exc))}[/]")
            failures += 1
            continue
        found.extend(Found(cls, resource) for resource in resources)
    return found, failures


def _age(created_at: float) -> str:
    seconds = max(0, int(time.time() - created_at))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _alive(value: Optional[bool]) -> str:
    return {True: "yes", False: "no", None: "unknown"}[value]


def as_dict(resource: Any) -> dict[str, Any]:
    owner = resource.owner
    return {
        "provider": resource.provider,
        "id": resource.id,
        "target": resource.target,
        "owner": None if owner is None else asdict(owner),
        "owner_alive": resource.owner_alive,
        "orphaned": resource.orphaned,
        "running": resource.running,
        "created_at": resource.created_at,
        "address": resource.address,
    }


def _table(found: list[Found]) -> Table:
    table = Table(
        "provider", "id", "target", "owner", "owner alive", "running", "age", "address", box=None
    )
    for item in found:
        r = item.resource
        owner = r.owner.describe() if r.owner is not None else "unknown"
        table.add_row(
            escape(r.provider),
            escape(r.id),
            escape(r.target),
            escape(owner),
            _alive(r.owner_alive),
            "yes" if r.running else "no",
            _age(r.created_at),
            escape(r.address),
        )
    return table


def _removable(item: Found, everything: bool) -> bool:
    resource = item.resource
    if resource.orphaned:
        return True
    # --all: live owners too, but only those on this machine (others may be busy elsewhere).
    return everything and resource.owner is not None and resource.owner.is_local()


def register(app: typer.Typer) -> None:
    @app.command()
    def ps(
        as_json: bool = typer.Option(False, "--json", help="Print the list as JSON on stdout."),
        verbose: bool = typer.Option(
            False, "--verbose", "-v", help="Say which providers were skipped and why."
        ),
    ) -> None:
        """List running environments: those you started with the local, sandbox or uv
        provider, and every one the Docker engine (or a cluster) lists.

        Local, sandbox and uv environments are recorded in your own state folder
        ($OPENENV_STATE_DIR, else ~/.local/state/openenv), so another user's do not show here;
        containers and cluster resources are listed by their engine, whoever started them.
        """
        found, failures = collect(verbose)
        if as_json:
            typer.echo(json.dumps([as_dict(item.resource) for item in found], indent=2))
        elif found:
            # Piped: full ids and addresses on one line each, for grep and awk.
            wide = None if sys.stdout.isatty() else 10_000
            Console(highlight=False, width=wide).print(_table(found))
        else:
            console.print("No environments.")
        if failures:
            raise typer.Exit(1)

    @app.command()
    def gc(
        dry_run: bool = typer.Option(
            False, "--dry-run", "-n", help="Only print what would be removed."
        ),
        everything: bool = typer.Option(
            False,
            "--all",
            help="Also remove environments whose owner still runs on this machine.",
        ),
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before --all."),
        verbose: bool = typer.Option(
            False, "--verbose", "-v", help="Say which providers were skipped and why."
        ),
    ) -> None:
        """Remove environments whose owner is gone (a trainer that crashed or was killed)."""
        found, failures = collect(verbose)
        chosen = [item for item in found if _removable(item, everything)]
        if not chosen:
            console.print("Nothing to remove.")
            raise typer.Exit(1 if failures else 0)
        live = [item for item in chosen if not item.resource.orphaned]
        if live and not dry_run and not yes:
            console.print(_table(live))
            if not typer.confirm(
                f"Remove {len(live)} environment(s) whose owner still runs?", default=False
            ):
                raise typer.Exit(1)
        for item in chosen:
            r = item.resource
            what = f"{r.provider} {r.id} ({escape(r.target)})"
            if dry_run:
                typer.echo(f"would remove {r.provider} {r.id} {r.target}")
                continue
            try:
                item.provider.remove_resource(r)
            except Exception as exc:  # one stuck resource must not stop the sweep
                console.print(f"[red]could not remove {what}:[/] {escape(str(exc))}")
                failures += 1
                continue
            typer.echo(f"removed {r.provider} {r.id} {r.target}")
        if failures:
            raise typer.Exit(1)
