from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import RunningServer, serve


@pytest.fixture
def site_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty folder on `sys.path`, as a second site-packages; fake packages are unloaded."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    before = set(sys.modules)
    yield site
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        if str(tmp_path) in str(getattr(module, "__file__", "") or ""):
            del sys.modules[name]


@pytest.fixture(scope="module")
def echo_server() -> Iterator[RunningServer]:
    with serve("echo_env.server.app:app") as server:
        yield server


@pytest.fixture(scope="module")
def grid_server() -> Iterator[RunningServer]:
    with serve("grid_world_env.server.app:app") as server:
        yield server
