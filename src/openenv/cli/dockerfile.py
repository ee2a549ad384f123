"""The Dockerfile of an environment image, generated when it is needed.

Environments ship no Dockerfile: `openenv build` writes this template into the staged build
context, and `openenv push` into the staged Space, so a fix to the template reaches every
environment. An environment that needs another one ships it (`Dockerfile` at its root, or
`server/Dockerfile`), and that one is used instead.

Design: a builder stage makes one virtual environment from wheels that `openenv build` prepared
on the host (no package index is reachable while building), and the final stage copies just
that venv, so the image holds one copy of it. The server runs as PID 1 in exec form (stop
signals reach uvicorn, which shuts sessions down cleanly), as a non-root user, with a
HEALTHCHECK on `/health` that needs nothing but Python. Every module is compiled to bytecode at
install and the command imports the server with the garbage collector off (`boot`): a container
starts fast. Nothing in it needs a writable root: HOME is /tmp, so the image runs hardened
(`docker_run_command`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openenv.core.manifest import EnvProject

DEFAULT_BASE_IMAGE = "openenv-base:latest"
BUILDER_LABEL = "org.openenv.stage=builder"
CONTAINER_PORT = 8000

_TEMPLATE = """\
# Built with `openenv build`, which puts the wheels of this environment, of openenv and of
# every dependency in ./wheels, so nothing is downloaded while the image builds. The default
# base image is made locally by `openenv build --base` (a Debian root file system with Python).
ARG BASE_IMAGE={base_image}

FROM ${{BASE_IMAGE}} AS builder
# Lets `openenv build` remove this stage's image once the build is done (this build's only:
# another build running at the same time still needs its own).
ARG OPENENV_BUILD=local
LABEL org.openenv.stage=builder org.openenv.build=${{OPENENV_BUILD}}
# 1: install from ./wheels only. A builder that can reach a package index may set 0.
ARG PIP_NO_INDEX=1
COPY wheels /tmp/wheels
# --compile: the bytecode of every module is in the image. The root file system is read-only
# when the provider runs it, so without it every start would compile every module anew.
RUN python3 -m venv /app/.venv \\
    && /app/.venv/bin/pip install --no-cache-dir --disable-pip-version-check --compile \\
        --find-links /tmp/wheels {dist_name}

FROM ${{BASE_IMAGE}}
RUN id -u openenv >/dev/null 2>&1 || useradd --create-home --uid 10001 openenv
COPY --from=builder /app/.venv /app/.venv
# HOME in /tmp: run with a read-only root (`--read-only --tmpfs /tmp`, as the Docker provider
# does), caches and config files still have somewhere to go.
ENV PATH=/app/.venv/bin:$PATH \\
    PYTHONUNBUFFERED=1 \\
    PYTHONDONTWRITEBYTECODE=1 \\
    HOME=/tmp
USER openenv
WORKDIR /home/openenv
EXPOSE {port}
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \\
    CMD ["python", "-c", "{healthcheck}"]
# Exec form: the server is PID 1 and gets SIGTERM itself. `openenv.core.env_server.boot` runs
# `python -m {package}.server.app` with the garbage collector off while it imports (faster start).
CMD ["python", "-m", "openenv.core.env_server.boot", "{package}.server.app", {cmd_args}]
"""

DOCKERIGNORE = """\
.venv
**/__pycache__
**/*.pyc
.git
.pytest_cache
.ruff_cache
build
dist
"""


def render_dockerfile(
    dist_name: str,
    package: str,
    *,
    port: int = CONTAINER_PORT,
    base_image: str = DEFAULT_BASE_IMAGE,
) -> str:
    """The Dockerfile text for distribution `dist_name` whose app is `package.server.app`."""
    healthcheck = (
        "import urllib.request; "
        f"urllib.request.urlopen('http://127.0.0.1:{port}/health', timeout=2)"
    )
    cmd_args = f'"--host", "0.0.0.0", "--port", "{port}"'
    return _TEMPLATE.format(
        cmd_args=cmd_args,
        dist_name=dist_name,
        package=package,
        port=port,
        base_image=base_image,
        healthcheck=healthcheck,
    )


def project_dockerfile(project: EnvProject, *, base_image: str = DEFAULT_BASE_IMAGE) -> str:
    """The Dockerfile text for an environment: its own if it ships one, else the template."""
    if project.dockerfile is not None:
        return project.dockerfile.read_text(encoding="utf-8")
    return render_dockerfile(
        project.dist_name, project.package, port=project.manifest.port, base_image=base_image
    )
