"""Fixtures for the compatibility tests: a virtual environment with the published package.

The published OpenEnv distribution is also called `openenv`, so it cannot share our virtual
environment. `compat_python` builds one once at `<repo>/.compat-venv/openenv-<version>/` (reused
while its marker file names the pinned version and the package imports) and returns its interpreter. If it cannot be built (no network, no
index), every test using it errors with the installer's output: the compat tests never skip.

`OPENENV_COMPAT_PYTHON=/path/to/python` uses an existing interpreter that already has the published
package instead (nothing is built then).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import REPO, RunningServer, serve

PUBLISHED_VERSION = "0.10.0"
PUBLISHED_REQUIREMENT = f"openenv=={PUBLISHED_VERSION}"
#: Everything lives under this (git-ignored) folder: the venv, its marker and a build lock.
CACHE_DIR = REPO / ".compat-venv"
VENV_DIR = CACHE_DIR / f"openenv-{PUBLISHED_VERSION}"
MARKER = VENV_DIR / "openenv-compat.json"
HERE = Path(__file__).resolve().parent
#: Import string of the echo server written against the published package (this folder).
PUBLISHED_ECHO_APP = "tests.compat.published_echo_server:app"
#: Import string of our echo server.
OUR_ECHO_APP = "echo_env.server.app:app"
OUR_PYTHON = str(REPO / ".venv" / ("Scripts" if os.name == "nt" else "bin") / "python")
INSTALL_TIMEOUT_S = 900


def _venv_python(venv: Path) -> Path:
    if os.name == "nt":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def _installed_version(python: Path) -> str | None:
    """The `openenv` version importable by `python`, or None."""
    if not python.exists():
        return None
    probe = (
        "import importlib.metadata as m, openenv.core, fastmcp, uvicorn; "
        "print(m.version('openenv'))"
    )
    try:
        out = subprocess.run(
            [str(python), "-c", probe], capture_output=True, text=True, timeout=120, cwd=HERE
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _marker_ok() -> bool:
    try:
        marker = json.loads(MARKER.read_text())
    except (OSError, ValueError):
        return False
    if marker.get("requirement") != PUBLISHED_REQUIREMENT or not _venv_python(VENV_DIR).exists():
        return False
    # A cheap sanity check that the package is still installed (no interpreter start-up).
    pattern = f"openenv-{PUBLISHED_VERSION}.dist-info"
    return any(VENV_DIR.glob(f"lib/python*/site-packages/{pattern}")) or any(
        VENV_DIR.glob(f"Lib/site-packages/{pattern}")
    )


def _run(cmd: list[str], log: list[str]) -> None:
    log.append("$ " + " ".join(cmd))
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, cwd=REPO
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.append(str(exc))
        raise RuntimeError("\n".join(log)) from exc
    log.append((proc.stdout + proc.stderr).strip()[-4000:])
    if proc.returncode != 0:
        raise RuntimeError("\n".join(log))


def _build_venv() -> None:
    shutil.rmtree(VENV_DIR, ignore_errors=True)
    log: list[str] = []
    python = str(_venv_python(VENV_DIR))
    uv = shutil.which("uv")
    if uv:
        # --no-config: the workspace's [tool.uv] settings are not meant for this environment.
        _run([uv, "venv", "--no-config", "--python", sys.executable, str(VENV_DIR)], log)
        _run([uv, "pip", "install", "--no-config", "--python", python, PUBLISHED_REQUIREMENT], log)
    else:
        _run([sys.executable, "-m", "venv", str(VENV_DIR)], log)
        _run([python, "-m", "pip", "install", "--disable-pip-version-check",
              PUBLISHED_REQUIREMENT], log)
    version = _installed_version(Path(python))
    if version != PUBLISHED_VERSION:
        log.append(f"installed openenv version is {version!r}, expected {PUBLISHED_VERSION!r}")
        raise RuntimeError("\n".join(log))
    MARKER.write_text(
        json.dumps({"requirement": PUBLISHED_REQUIREMENT, "python": python, "built": time.time()})
    )


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """Serialise builds across processes (e.g. pytest-xdist workers)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no cross-process lock
        yield
        return
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_compat_venv() -> str:
    """Return the python of a venv holding the published package, building it if needed."""
    override = os.environ.get("OPENENV_COMPAT_PYTHON")
    if override:
        version = _installed_version(Path(override))
        if version != PUBLISHED_VERSION:
            raise RuntimeError(
                f"OPENENV_COMPAT_PYTHON={override} has openenv {version!r}, "
                f"expected {PUBLISHED_VERSION}"
            )
        return override
    with _lock():
        if not _marker_ok():
            _build_venv()
    return str(_venv_python(VENV_DIR))


@pytest.fixture(scope="session")
def compat_python() -> str:
    try:
        return ensure_compat_venv()
    except Exception as exc:
        pytest.fail(
            f"Could not create the compat virtual environment with {PUBLISHED_REQUIREMENT} "
            f"at {VENV_DIR} (network or package index unavailable?). The compat tests need it; "
            f"they are marked 'compat' (deselect with -m 'not compat').\n{exc}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def published_server(compat_python: str) -> Iterator[RunningServer]:
    """The published package's echo server (tests/compat/published_echo_server.py)."""
    with serve(PUBLISHED_ECHO_APP, python=compat_python) as server:
        yield server


@pytest.fixture(scope="session")
def our_server() -> Iterator[RunningServer]:
    """Our echo server, run by our own virtual environment's python."""
    with serve(OUR_ECHO_APP, python=OUR_PYTHON) as server:
        yield server
