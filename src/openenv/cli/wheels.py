"""Wheels prepared on the host for an environment image.

Images are built where no package index can be reached from inside the build, so the host
collects every wheel the image needs. `openenv` itself always comes from the running source
tree: the published package on PyPI with the same name is a different project.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from rich.text import Text

import openenv
from openenv.core.manifest import EnvProject

from ._output import console, labelled


class WheelError(RuntimeError):
    """A wheel could not be built or downloaded; the message says which and why."""


def openenv_source_root() -> Path:
    """The source checkout that the running `openenv` comes from."""
    package = Path(openenv.__file__).resolve().parent
    for candidate in (package.parent.parent, package.parent):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and 'name = "openenv"' in pyproject.read_text(encoding="utf-8"):
            return candidate
    raise WheelError(
        f"openenv is installed from {package}, not from a source checkout, so its wheel "
        "cannot be rebuilt. Install openenv from its repository (`pip install -e .` or "
        "`uv sync`) and run this again."
    )


def _pip() -> list[str]:
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            return [found]
    raise WheelError("pip is needed to collect wheels; install it (`python -m ensurepip`).")


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise WheelError(f"{what} failed ({' '.join(command[:4])} ...):\n{tail}")


def build_wheel(source: Path, dest: Path) -> Path:
    """Build one wheel of the project at `source` (no dependencies) into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="openenv-wheel-") as out:
        uv = shutil.which("uv")
        if uv:
            command = [uv, "build", "--wheel", "--quiet", "--out-dir", out, str(source)]
        else:
            command = [*_pip(), "wheel", "--no-deps", "--quiet", "--wheel-dir", out, str(source)]
        _run(command, f"building the wheel of {source}")
        built = sorted(Path(out).glob("*.whl"))
        if len(built) != 1:
            raise WheelError(f"expected one wheel from {source}, got {[p.name for p in built]}")
        target = dest / built[0].name
        shutil.move(str(built[0]), target)
    return target


#: A quoted requirement on the openenv runtime with a version range: "openenv>=0.2.2",
#: 'openenv-core[x]>=0.2; python_version>"3.9"' (OpenEnv's templates pin its own releases).
_OPENENV_PIN = re.compile(
    r"""(["'])\s*openenv(?:[-_.]core)?\s*(\[[^\]"']*\])?\s*[<>=!~][^"';]*(;(?:(?!\1).)*)?\1""",
    re.I,
)
_COPY_SKIP = shutil.ignore_patterns(".venv", "__pycache__", ".git", "build", "dist", "*.egg-info")


def unpin_openenv(pyproject: str) -> str:
    """`pyproject.toml` text with every versioned requirement on `openenv` or `openenv-core`
    made a plain `openenv`: the image installs the openenv of this checkout, whatever its
    version, so a range written for OpenEnv's releases ("openenv>=0.2.2") must not refuse it."""
    return _OPENENV_PIN.sub(
        lambda m: f"{m.group(1)}openenv{m.group(2) or ''}{m.group(3) or ''}{m.group(1)}", pyproject
    )


def build_project_wheels(project: EnvProject, dest: Path) -> list[Path]:
    """Wheels of this checkout's `openenv` and of the environment itself, no third-party ones.

    An environment that pins openenv's version (as OpenEnv's `openenv init` writes it) is
    built from a copy whose pin is removed; its folder is left as it is.
    """
    ours = build_wheel(openenv_source_root(), dest)
    pyproject = project.root / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    unpinned = unpin_openenv(text)
    if unpinned == text:
        return [ours, build_wheel(project.root, dest)]
    console.print(
        labelled(
            "note:",
            "dim",
            f"{project.dist_name} pins openenv's version; its wheel requires the "
            f"openenv {openenv.__version__} built here instead",
        )
    )
    with tempfile.TemporaryDirectory(prefix="openenv-unpinned-") as scratch:
        copy = Path(scratch) / project.root.name
        shutil.copytree(project.root, copy, ignore=_COPY_SKIP, symlinks=True)
        (copy / "pyproject.toml").write_text(unpinned, encoding="utf-8")
        return [ours, build_wheel(copy, dest)]


def wheel_cache() -> Path:
    """Third-party wheels kept between builds: most builds then resolve with no index at all."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "openenv" / "wheels"


def _collect_command(
    dest: Path, requirements: list[str], python_version: Optional[str], *, offline: bool
) -> list[str]:
    host = f"{sys.version_info.major}.{sys.version_info.minor}"
    if python_version in (None, host):
        command = [*_pip(), "wheel", "--quiet", "--disable-pip-version-check"]
        command += ["--wheel-dir", str(dest)]
    else:
        command = [*_pip(), "download", "--quiet", "--disable-pip-version-check"]
        command += ["--only-binary", ":all:", "--python-version", str(python_version)]
        command += ["--dest", str(dest)]
    command += ["--find-links", str(dest), "--find-links", str(wheel_cache())]
    if offline:
        command.append("--no-index")
    return [*command, *requirements]


def collect_wheels(
    project: EnvProject, dest: Path, *, python_version: Optional[str] = None
) -> list[Path]:
    """Every wheel the environment needs, its dependencies included, in `dest`.

    `python_version` ("3.11") is the image's Python; dependencies are built for the host's
    interpreter when it matches, and otherwise downloaded as binary wheels for that version.
    The cache is tried first with no index; anything missing or too old there sends the
    whole resolution to the index.
    """
    dest.mkdir(parents=True, exist_ok=True)
    with console.status(Text(f"Building the wheels of openenv and {project.dist_name}")):
        local = build_project_wheels(project, dest)
    # Naming the local wheel files makes pip take them for `openenv` and the environment,
    # never the published `openenv` from the index.
    requirements = [str(path) for path in local]
    cache = wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    target = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    with console.status(
        Text(f"Collecting the dependencies of {project.dist_name} for Python {target}")
    ):
        offline = _collect_command(dest, requirements, python_version, offline=True)
        if subprocess.run(offline, capture_output=True).returncode != 0:
            online = _collect_command(dest, requirements, python_version, offline=False)
            _run(online, f"collecting the dependencies of {project.dist_name}")
    ours = {path.name for path in local}
    for wheel in dest.glob("*.whl"):
        if wheel.name not in ours and not (cache / wheel.name).exists():
            _add_to_cache(wheel, cache)
    return sorted(dest.glob("*.whl"))


def _add_to_cache(wheel: Path, cache: Path) -> None:
    """Copy `wheel` into the cache whole or not at all: another build collecting at the same
    time reads the cache, and must never find half a wheel under its final name."""
    fd, partial = tempfile.mkstemp(prefix=f".{wheel.name}.", suffix=".partial", dir=cache)
    os.close(fd)
    try:
        shutil.copy2(wheel, partial)
        os.replace(partial, cache / wheel.name)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
