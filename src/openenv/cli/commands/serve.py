"""`openenv serve`: run an environment locally from its folder, package or app import string."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from openenv.core.env_server.runner import DEFAULT_HOST
from openenv.core.manifest import DEFAULT_PORT, ManifestError, load_manifest, load_project

from .._output import console, fail


def resolve_app(target: str) -> tuple[str, Optional[Path]]:
    """Return the app import string for `target` and the folder to put on `sys.path`, if any.

    `target` is an environment folder (with `openenv.yaml`), an installed environment by
    name (`echo`, `echo_env`, `openenv-echo`), or an import string (`echo_env.server.app:app`).
    """
    path = Path(target)
    if path.is_dir():
        try:
            project = load_project(path)
        except ManifestError as exc:
            fail(str(exc), "Run `openenv init NAME` to create an environment folder.", code=2)
        return project.manifest.app, project.root
    if ":" in target:
        # Like uvicorn: modules in the current folder import without being installed.
        return target, Path.cwd()
    from openenv.auto import discover

    info = discover().resolve(target)
    if info is not None:
        # An installed environment by any of its names: 'echo', 'echo_env', 'openenv-echo'.
        if info.manifest_path is not None:
            with contextlib.suppress(ManifestError):
                return load_manifest(info.manifest_path).app, None
        return f"{info.package}.server.app:app", None
    if importlib.util.find_spec(target.split(".", 1)[0]) is None:
        fail(
            f"'{target}' is neither an environment folder nor an installed package.",
            "Pass a folder with openenv.yaml, an environment name such as 'echo' "
            "(see `openenv list`), or an import string such as 'echo_env.server.app:app'.",
            code=2,
        )
    return f"{target}.server.app:app", None


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
    ) -> None:
        """Serve an environment locally, without Docker."""
        from openenv.core.env_server.runner import run_server

        app_path, root = resolve_app(target)
        if root is not None:
            # The folder's package must import in this process, in reload and worker children too.
            sys.path.insert(0, str(root))
            os.environ["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p
            )
        console.print(f"Serving [bold]{app_path}[/] on http://{host}:{port}")
        extra = {"reload_dirs": [str(root)]} if reload and root is not None else {}
        run_server(app_path, host=host, port=port, workers=workers, reload=reload, **extra)
