"""Servers for the MCP tests, in this process (OPENENV_MODE is read when the app is built).

(tests/mcp is not a package: a `tests/mcp/__init__.py` would shadow
the `mcp` SDK in servers started with tests/ on PYTHONPATH)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.server import RunningServer, serve  # noqa: E402

ECHO_APP = "echo_env.server.app:app"
TOOLS_APP = "mcp_apps.tools:app"
MODES_APP = "mcp_apps.modes:app"
LOGGED_APP = "mcp_apps.logged:app"


@pytest.fixture(scope="session")
def echo_server() -> Iterator[RunningServer]:
    with serve(ECHO_APP) as server:
        yield server


@pytest.fixture(scope="session")
def tools_server() -> Iterator[RunningServer]:
    with serve(TOOLS_APP) as server:
        yield server


@pytest.fixture(scope="session")
def simulation_server() -> Iterator[RunningServer]:
    with serve(MODES_APP, env={"OPENENV_MODE": "simulation"}, in_process=True) as server:
        yield server


@pytest.fixture(scope="session")
def production_server() -> Iterator[RunningServer]:
    with serve(MODES_APP, env={"OPENENV_MODE": "production"}, in_process=True) as server:
        yield server


@pytest.fixture(scope="session")
def default_mode_server() -> Iterator[RunningServer]:
    """OPENENV_MODE unset: the server's default mode."""
    saved = os.environ.pop("OPENENV_MODE", None)
    try:
        with serve(MODES_APP) as server:
            yield server
    finally:
        if saved is not None:
            os.environ["OPENENV_MODE"] = saved


@pytest.fixture(scope="session")
def logged_server() -> Iterator[RunningServer]:
    with serve(LOGGED_APP) as server:
        yield server
