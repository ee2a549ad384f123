"""Which reference environments can run in this checkout.

`reasoning_gym_env` is outside the uv workspace: its `reasoning-gym` needs `pycosat`, which has
no wheels and needs a C compiler to build, and the README's test command must work on a fresh
machine without one. `.ci/run` installs it (`uv pip install -e envs/reasoning_gym_env`).
`repo_env` needs git, which a fresh machine may lack. Tests about every environment skip the
ones that cannot run here, saying why.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Optional

import pytest

from .server import REPO

ENVS_DIR = REPO / "envs"
#: System programs an environment needs at run time.
NEEDS = {"repo_env": ("git",)}


def env_dirs() -> list[Path]:
    """Every reference environment folder (with openenv.yaml), sorted."""
    return sorted(p for p in ENVS_DIR.iterdir() if (p / "openenv.yaml").is_file())


def missing(name: str) -> Optional[str]:
    """Why the environment `name` cannot run here, or None."""
    if importlib.util.find_spec(name) is None:
        return (
            f"{name} is not installed: it is outside the uv workspace (a dependency needs a C "
            f"compiler); `uv pip install -e envs/{name}` installs it (.ci/run does)"
        )
    absent = [program for program in NEEDS.get(name, ()) if shutil.which(program) is None]
    if absent:
        return f"{name} needs {', '.join(absent)}, which is not installed here"
    return None


def installed(name: str) -> bool:
    return missing(name) is None


def env_params(names_or_dirs: list) -> list:
    """pytest params, each skipped (with the reason) when its environment cannot run here."""
    params = []
    for item in names_or_dirs:
        name = item.name if isinstance(item, Path) else str(item)
        reason = missing(name)
        marks = pytest.mark.skipif(reason is not None, reason=reason or "")
        params.append(pytest.param(item, marks=marks, id=name))
    return params
