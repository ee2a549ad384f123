"""The virtual environment holding the published OpenEnv package (`openenv==0.10.0`).

The published distribution is also called `openenv`, so it cannot share our virtual environment.
`ensure_compat_venv()` builds one once in a per-user cache shared by every checkout and worktree
(`~/.cache/openenv-tests/compat/openenv-<version>-py<X.Y>/`, or under `$OPENENV_COMPAT_CACHE`) and
reuses it while its marker file names the pinned requirement and the package's dist-info is
present. It holds only the published package, so nothing in it depends on the checkout. It uses
`uv venv` + `uv pip install` when `uv` is on PATH, else `python -m venv` + pip. Builds are
serialised with a file lock, so parallel test processes do not race.

`OPENENV_COMPAT_PYTHON=/path/to/python` uses an interpreter that already has the published
package instead (nothing is built then).

Pre-build it (e.g. in CI, before the tests), from the repo root:
`python -m tests.compat.compat_venv`.
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

REPO = Path(__file__).resolve().parents[2]
PUBLISHED_VERSION = "0.10.0"
PUBLISHED_REQUIREMENT = f"openenv=={PUBLISHED_VERSION}"


def _cache_dir() -> Path:
    explicit = os.environ.get("OPENENV_COMPAT_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "openenv-tests" / "compat"


#: Everything lives under this folder: the venv, its marker and a build lock.
CACHE_DIR = _cache_dir()
VENV_DIR = CACHE_DIR / f"openenv-{PUBLISHED_VERSION}-py{sys.version_info[0]}.{sys.version_info[1]}"
MARKER = VENV_DIR / "openenv-compat.json"
INSTALL_TIMEOUT_S = 900


class CompatVenvError(RuntimeError):
    """The compat virtual environment could not be built or is unusable."""


def venv_python(venv: Path | None = None) -> Path:
    venv = VENV_DIR if venv is None else venv
    if os.name == "nt":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def installed_version(python: Path) -> str | None:
    """The `openenv` version `python` can import (with fastmcp and uvicorn), or None."""
    if not python.exists():
        return None
    probe = "import importlib.metadata as m, fastmcp, uvicorn; print(m.version('openenv'))"
    try:
        out = subprocess.run(
            [str(python), "-c", probe],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=CACHE_DIR if CACHE_DIR.exists() else None,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def is_built() -> bool:
    """The marker names the pinned requirement and the package is still installed (cheap)."""
    try:
        marker = json.loads(MARKER.read_text())
    except (OSError, ValueError):
        return False
    if marker.get("requirement") != PUBLISHED_REQUIREMENT or not venv_python().exists():
        return False
    dist_info = f"openenv-{PUBLISHED_VERSION}.dist-info"
    return any(VENV_DIR.glob(f"lib/python*/site-packages/{dist_info}")) or any(
        VENV_DIR.glob(f"Lib/site-packages/{dist_info}")
    )


def _run(cmd: list[str], log: list[str]) -> None:
    log.append("$ " + " ".join(cmd))
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, cwd=CACHE_DIR
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.append(str(exc))
        raise CompatVenvError("\n".join(log)) from exc
    log.append((proc.stdout + proc.stderr).strip()[-4000:])
    if proc.returncode != 0:
        raise CompatVenvError("\n".join(log))


def _build() -> None:
    shutil.rmtree(VENV_DIR, ignore_errors=True)
    log: list[str] = []
    python = str(venv_python())
    uv = shutil.which("uv")
    if uv:
        # --no-config: the workspace's [tool.uv] settings are not meant for this environment.
        _run([uv, "venv", "--no-config", "--python", sys.executable, str(VENV_DIR)], log)
        _run([uv, "pip", "install", "--no-config", "--python", python, PUBLISHED_REQUIREMENT], log)
    else:
        _run([sys.executable, "-m", "venv", str(VENV_DIR)], log)
        _run(
            [python, "-m", "pip", "install", "--disable-pip-version-check", PUBLISHED_REQUIREMENT],
            log,
        )
    version = installed_version(Path(python))
    if version != PUBLISHED_VERSION:
        log.append(f"installed openenv version is {version!r}, expected {PUBLISHED_VERSION!r}")
        raise CompatVenvError("\n".join(log))
    # Written last: a half-built venv never looks valid.
    MARKER.write_text(
        json.dumps({"requirement": PUBLISHED_REQUIREMENT, "python": python, "built": time.time()})
    )


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no cross-process lock
        yield
        return
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
        version = installed_version(Path(override))
        if version != PUBLISHED_VERSION:
            raise CompatVenvError(
                f"OPENENV_COMPAT_PYTHON={override} has openenv {version!r}, "
                f"expected {PUBLISHED_VERSION}"
            )
        return override
    with _build_lock():
        if not is_built():
            _build()
    return str(venv_python())


if __name__ == "__main__":
    print(ensure_compat_venv())
