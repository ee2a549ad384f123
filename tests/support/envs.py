"""Which reference environments this checkout has installed.

`reasoning_gym_env` is outside the uv workspace: its `reasoning-gym` needs `pycosat`, which has
no wheels and needs a C compiler to build, and the README's test command must work on a fresh
machine without one. `.ci/run` installs it (`uv pip install -e envs/reasoning_gym_env`); tests
about every environment skip the ones that are not installed, saying so.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from .server import REPO

ENVS_DIR = REPO / "envs"
NOT_INSTALLED = (
    "{name} is not installed: it is outside the uv workspace (a dependency needs a C compiler); "
    "`uv pip install -e envs/{name}` installs it (.ci/run does)"
)


def env_dirs() -> list[Path]:
    """Every reference environment folder (with openenv.yaml), sorted."""
    return sorted(p for p in ENVS_DIR.iterdir() if (p / "openenv.yaml").is_file())


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def env_params(names_or_dirs: list) -> list:
    """pytest params, each skipped (with the reason) when its environment is not installed."""
    params = []
    for item in names_or_dirs:
        name = item.name if isinstance(item, Path) else str(item)
        reason = NOT_INSTALLED.format(name=name)
        marks = pytest.mark.skipif(not installed(name), reason=reason)
        params.append(pytest.param(item, marks=marks, id=name))
    return params
