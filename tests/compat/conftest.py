"""Fixtures for the compatibility tests against the published OpenEnv package.

`compat_python` is a virtual environment with `openenv==0.10.0` (built once, see `venv.py`). If it
cannot be built (no network, no package index), every test using it errors with the installer's
output: the compat tests never skip. They are all marked `compat`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.server import REPO, RunningServer, serve

from .venv import INSTALL_TIMEOUT_S, PUBLISHED_REQUIREMENT, VENV_DIR, ensure_compat_venv, is_built

#: Import string of the echo server written against the published package (this folder).
PUBLISHED_ECHO_APP = "tests.compat.published_echo_server:app"
#: Import string of our echo server, served by our own virtual environment.
OUR_ECHO_APP = "echo_env.server.app:app"
OUR_PYTHON = str(REPO / ".venv" / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))
#: Sessions the published server accepts at once (test_our_client fills them all).
PUBLISHED_MAX_SESSIONS = 4


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    building = not is_built() and not os.environ.get("OPENENV_COMPAT_PYTHON")
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.compat)
            if building:  # the first test also pays for `pip install openenv==...`
                item.add_marker(pytest.mark.timeout(INSTALL_TIMEOUT_S + 120))


@pytest.fixture(scope="session")
def compat_python() -> str:
    try:
        return ensure_compat_venv()
    except Exception as exc:
        pytest.fail(
            f"Could not create the compat virtual environment with {PUBLISHED_REQUIREMENT} at "
            f"{VENV_DIR} (network or package index unavailable?). These tests need it; they are "
            f"marked 'compat' (deselect them with -m 'not compat').\n{exc}",
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
