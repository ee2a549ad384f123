"""`openenv validate`: is an environment folder ready to deploy, and does a server behave?"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.text import Text

from .._output import console, fail, success

if TYPE_CHECKING:
    from openenv.testing.report import CheckReport


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """Let SIGTERM unwind like Ctrl-C, so the folder's server is stopped on the way out."""

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _verdict(report: CheckReport, json_output: bool) -> None:
    """Say what passed, or exit 1 naming what failed and how to see why."""
    summary = report.summary()
    warnings = len(report.warnings)
    note = f", {warnings} warning{'s' if warnings != 1 else ''}" if warnings else ""
    name = report.environment or report.target
    if report.ok:
        success(
            f"{name}: every required criterion passed ({summary['required_passed_count']}/"
            f"{summary['required_total_count']}{note})"
        )
        return
    if report.unreachable:
        fail(
            report.unreachable,
            "Is the server running? Start it with `openenv serve` and check the host and port.",
        )
    failed = [c.name for c in report.failures]
    where = "each criterion's details in the JSON" if json_output else "the table's last column"
    noun = "criterion" if len(failed) == 1 else "criteria"
    fail(
        f"{name}: {len(failed)} required {noun} failed: {', '.join(failed)}",
        f"See {where} for what is wrong.",
    )


def register(app: typer.Typer) -> None:
    @app.command()
    def validate(
        target: Optional[str] = typer.Argument(
            None,
            help="Environment folder (default: the current one) or the http(s) URL of a "
            "running environment server.",
        ),
        url: Optional[str] = typer.Option(
            None, "--url", help="URL of a running server (the same as passing it as TARGET)."
        ),
        json_output: bool = typer.Option(
            False, "--json", help="Print only the JSON report on stdout (OpenEnv's format)."
        ),
        timeout: float = typer.Option(
            5.0, "--timeout", min=0.1, help="Seconds each request may take."
        ),
        start_timeout: float = typer.Option(
            60.0,
            "--start-timeout",
            min=1.0,
            help="Seconds a folder's server may take to answer /health.",
        ),
        run: bool = typer.Option(
            True,
            "--run/--no-run",
            help="Serve the folder and check it over the wire, or only check its files.",
        ),
        verbose: bool = typer.Option(
            False, "--verbose", "-v", help="Show the details of passing criteria too."
        ),
    ) -> None:
        """Check an environment folder (files, then a real server) or a running server.

        Exits 0 when every required criterion passed, 1 when one failed, 2 on a usage error.
        """
        if url is not None and target is not None and target != url:
            fail(
                f"got both TARGET {target!r} and --url {url!r}.",
                "Pass the URL once, as TARGET or with --url.",
                code=2,
            )
        chosen = url or target or "."
        if url is not None or _is_url(chosen):
            from openenv.testing.validation import normalize_url, validate_running_environment

            try:
                normalize_url(chosen)
            except ValueError as exc:
                fail(f"{exc}.", "Pass e.g. --url http://localhost:8000", code=2)

            with console.status(Text(f"Checking {chosen}")):
                report = validate_running_environment(chosen, timeout_s=timeout)
        else:
            folder = Path(chosen)
            if not folder.is_dir():
                fail(
                    f"{chosen!r} is neither an environment folder nor an http(s) URL.",
                    "Pass a folder with openenv.yaml, or the URL of a running server "
                    "(http://host:port).",
                    code=2,
                )
            if (
                not (folder / "openenv.yaml").is_file()
                and not (folder / "pyproject.toml").is_file()
            ):
                fail(
                    f"{folder.resolve()} is not an environment folder (no openenv.yaml, no "
                    "pyproject.toml).",
                    "Run it in an environment folder, or create one with `openenv init NAME`.",
                    code=2,
                )
            from openenv.testing.validation import validate_local_environment

            with _sigterm_as_exit(), console.status(Text(f"Validating {folder}")) as status:
                report = validate_local_environment(
                    folder,
                    run=run,
                    timeout_s=timeout,
                    start_timeout_s=start_timeout,
                    progress=lambda message: status.update(Text(message)),
                )
        if json_output:
            typer.echo(report.to_json())
        elif not report.unreachable:  # one error line says it all
            console.print(report.table(verbose))
        _verdict(report, json_output)
