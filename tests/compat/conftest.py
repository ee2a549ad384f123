"""Fixtures for the compatibility tests against the published OpenEnv package.

`compat_python` is a virtual environment with `openenv==0.10.0` (built once, see compat_venv.py).
If it cannot be built (no network, no package index), every test using it errors with the
installer's output: the compat tests never skip. They are all marked `compat`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tests.support.server import REPO, RunningServer, serve

from .compat_venv import (
    INSTALL_TIMEOUT_S,
    PUBLISHED_REQUIREMENT,
    VENV_DIR,
    ensure_compat_venv,
    is_built,
)

#: Import string of the echo server written against the published package (this folder).
PUBLISHED_ECHO_APP = "tests.compat.published_echo_server:app"
#: Import string of our echo server, served by our own virtual environment.
OUR_ECHO_APP = "echo_env.server.app:app"
_REPO_VENV_PYTHON = REPO / ".venv" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
OUR_PYTHON = str(_REPO_VENV_PYTHON) if _REPO_VENV_PYTHON.exists() else sys.executable
#: Sessions the published server accepts at once (test_our_client fills them all).
PUBLISHED_MAX_SESSIONS = 4


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """While the venv is not built yet, the first compat test also pays for installing it."""
    if is_built() or os.environ.get("OPENENV_COMPAT_PYTHON"):
        return
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.timeout(INSTALL_TIMEOUT_S + 120))


@pytest.fixture(scope="session")
def compat_python() -> str:
    try:
        return ensure_compat_venv()
    except Exception as exc:
        problem = f"{type(exc).__name__}: {exc}"
    # Outside the except block, so the report shows only this message.
    pytest.fail(
        f"Could not get a virtual environment with the published {PUBLISHED_REQUIREMENT} "
        f"(building it at {VENV_DIR}; network or package index unavailable?). The compat tests "
        f"need it and do not skip; deselect them with -m 'not compat'.\n{problem}",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def published_server(compat_python: str) -> Iterator[RunningServer]:
    """The published package's echo server (published_echo_server.py), on the compat venv."""
    env = {"OPENENV_COMPAT_MAX_ENVS": str(PUBLISHED_MAX_SESSIONS)}
    with serve(PUBLISHED_ECHO_APP, env=env, python=compat_python) as server:
        yield server


@pytest.fixture(scope="session")
def our_server() -> Iterator[RunningServer]:
    """Our echo server, run by our own virtual environment's python."""
    with serve(OUR_ECHO_APP, python=OUR_PYTHON) as server:
        yield server
