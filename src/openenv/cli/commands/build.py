"""`openenv build`: a Docker image of an environment, built with no registry in reach.

The build context is staged in a temporary folder: the environment's files, a Dockerfile
generated from the template (or the environment's own, if it ships one) and `wheels/`, every
wheel the image installs, collected on the host. The base image is made locally when it is
missing (see `openenv.cli.base_image`).
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.text import Text

from openenv.core.manifest import EnvProject, ManifestError, load_project
from openenv.providers.docker import docker_run_command

from .._output import console, fail, success
from ..base_image import (
    DEFAULT_SUITE,
    PYTHON_LABEL,
    BaseImageError,
    build_base_image,
    image_exists,
    packages_changed,
)
from ..dockerfile import BUILDER_LABEL, DEFAULT_BASE_IMAGE, project_dockerfile, render_dockerfile
from ..wheels import WheelError, collect_wheels

_SKIP = shutil.ignore_patterns(
    ".venv", "__pycache__", "*.pyc", ".git", ".pytest_cache", ".ruff_cache", "build", "dist"
)


def docker_client() -> Any:
    """A client of the local Docker engine, or a clear exit saying how to get one."""
    try:
        import docker
        import docker.errors
    except ImportError:
        fail(
            "the Docker SDK for Python is not installed.",
            "Install it with `pip install 'openenv[docker]'`.",
        )
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        fail(
            f"cannot reach the Docker engine: {exc}",
            "Start it (`dockerd &`, or `systemctl start docker`) or set DOCKER_HOST.",
        )
    return client


def image_python(client: Any, image: str) -> str:
    """The Python version inside `image`: its label, else asked from the image itself."""
    labels = client.images.get(image).labels or {}
    if PYTHON_LABEL in labels:
        return str(labels[PYTHON_LABEL])
    output = client.containers.run(
        image,
        ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        remove=True,
    )
    return output.decode().strip()


def ensure_base_image(client: Any, image: str, *, rebuild: bool, suite: str) -> str:
    """Make sure `image` exists (making the default one if needed); returns its Python."""
    stale = image == DEFAULT_BASE_IMAGE and image_exists(client, image)
    stale = stale and packages_changed(client, image)
    if rebuild or stale or not image_exists(client, image):
        if image != DEFAULT_BASE_IMAGE and not rebuild:
            fail(
                f"base image {image} is not on this machine and cannot be pulled here.",
                f"Build or load it first, or drop --base-image to use {DEFAULT_BASE_IMAGE}, "
                "which openenv makes locally.",
            )
        console.print(f"Making the base image [bold]{escape(image)}[/] (once per machine)")
        try:
            build_base_image(client, image, suite=suite)
        except BaseImageError as exc:
            fail(str(exc))
        success(f"base image {image}")
    return image_python(client, image)


def stage_files(project: EnvProject, dest: Path, *, use_template: bool = False) -> Path:
    """Copy the environment's files to `dest` and write the Dockerfile there; returns its path.

    The Dockerfile is the environment's own when it ships one (unless `use_template`), else
    the template's.
    """
    shutil.copytree(project.root, dest, ignore=_SKIP, dirs_exist_ok=True)
    dockerfile = dest / "Dockerfile"
    if use_template:
        text = render_dockerfile(project.dist_name, project.package, port=project.manifest.port)
    else:
        text = project_dockerfile(project)
    dockerfile.write_text(text, encoding="utf-8")
    return dockerfile


def stage_context(
    project: EnvProject, dest: Path, python_version: str, *, use_template: bool = False
) -> Path:
    """Fill `dest` with the build context, wheels included; returns the Dockerfile's path."""
    dockerfile = stage_files(project, dest, use_template=use_template)
    try:
        collect_wheels(project, dest / "wheels", python_version=python_version)
    except WheelError as exc:
        fail(str(exc))
    return dockerfile


def _parse_build_args(values: list[str]) -> dict[str, str]:
    args: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            fail(f"--build-arg {value!r} is not KEY=VALUE.", code=2)
        args[key] = val
    return args


def run_docker_build(
    client: Any,
    context: Path,
    dockerfile: Path,
    tag: str,
    build_args: dict[str, str],
    no_cache: bool,
) -> str:
    """Build and stream the engine's output into a status line; returns the image id."""
    log: list[str] = []
    image_id: Optional[str] = None
    build_id = secrets.token_hex(8)
    build_args = {**build_args, "OPENENV_BUILD": build_id}
    with console.status(Text(f"Building {tag}")) as status:
        for chunk in client.api.build(
            path=str(context),
            dockerfile=str(dockerfile.relative_to(context)),
            tag=tag,
            buildargs=build_args,
            nocache=no_cache,
            rm=True,
            forcerm=True,
            decode=True,
        ):
            if "error" in chunk:
                detail = chunk.get("errorDetail", {}).get("message", chunk["error"])
                tail = "\n".join(log[-20:])
                fail(f"docker build failed: {detail.strip()}\n{tail}")
            text = str(chunk.get("stream", "")).strip()
            if text:
                log.extend(text.splitlines())
                if text.startswith("Step "):
                    status.update(Text(f"Building {tag}: {text[:90]}"))
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
    if image_id is None:
        image_id = client.images.get(tag).id
    # The builder stage's image (venv and wheels) is of no use once its venv is copied out.
    labels = [BUILDER_LABEL, f"org.openenv.build={build_id}"]
    client.images.prune(filters={"dangling": True, "label": labels})
    return image_id


def register(app: typer.Typer) -> None:
    @app.command()
    def build(
        path: Path = typer.Argument(Path("."), help="Environment folder (default: current)."),
        tag: Optional[str] = typer.Option(
            None, "--tag", "-t", help="Image tag (default: openenv-<name>:latest)."
        ),
        base_image: str = typer.Option(
            DEFAULT_BASE_IMAGE,
            "--base-image",
            "-b",
            help="Image to build on; the default is made locally when missing.",
        ),
        rebuild_base: bool = typer.Option(
            False, "--rebuild-base", help="Make the default base image again first."
        ),
        suite: str = typer.Option(
            DEFAULT_SUITE, help="Debian release of a base image made locally."
        ),
        build_arg: list[str] = typer.Option(
            [], "--build-arg", help="KEY=VALUE passed to the Dockerfile; repeatable."
        ),
        no_cache: bool = typer.Option(False, "--no-cache", help="Build every layer anew."),
        keep_context: Optional[Path] = typer.Option(
            None, help="Also copy the staged build context (with its wheels) to this folder."
        ),
        base_only: bool = typer.Option(
            False, "--base-only", help="Only make sure the base image exists (make it if not)."
        ),
        use_template: bool = typer.Option(
            False,
            "--use-template",
            help="Build with the Dockerfile template even if the folder ships its own (such as "
            "the server/Dockerfile of OpenEnv's `openenv init`, which downloads while building).",
        ),
    ) -> None:
        """Build a Docker image of an environment, with its wheels prepared on this host."""
        if base_only:
            client = docker_client()
            python = ensure_base_image(client, base_image, rebuild=rebuild_base, suite=suite)
            success(f"base image {base_image} (Python {python})")
            typer.echo(base_image)
            return
        try:
            project = load_project(path)
        except ManifestError as exc:
            fail(str(exc), "Pass an environment folder (one with openenv.yaml).", code=2)
        args = _parse_build_args(build_arg)
        tag = tag or f"{project.image_name}:latest"
        started = time.monotonic()
        client = docker_client()
        python = ensure_base_image(client, base_image, rebuild=rebuild_base, suite=suite)
        args.setdefault("BASE_IMAGE", base_image)
        with tempfile.TemporaryDirectory(prefix="openenv-build-") as work:
            context = Path(work) / "context"
            dockerfile = stage_context(project, context, python, use_template=use_template)
            wheels = len(list((context / "wheels").glob("*.whl")))
            console.print(
                escape(f"Staged {project.root.name} with {wheels} wheels for Python {python}")
            )
            if keep_context is not None:
                shutil.copytree(context, keep_context, dirs_exist_ok=True)
            image_id = run_docker_build(client, context, dockerfile, tag, args, no_cache)
        size = client.images.get(image_id).attrs.get("Size", 0) / 1e6
        success(
            f"built {tag} ({image_id[7:19]}, {size:.0f} MB) in {time.monotonic() - started:.0f} s"
        )
        console.print(escape(f"Run it: {docker_run_command(tag)}"))
        typer.echo(tag)
