from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.server import RunningServer, serve

ECHO_APP = "echo_env.server.app:app"
COUNTER_APP = "client_apps.counter:app"


@pytest.fixture(scope="package")
def echo_server() -> Iterator[RunningServer]:
    with serve(ECHO_APP) as server:
        yield server


@pytest.fixture(scope="package")
def counter_server() -> Iterator[RunningServer]:
    with serve(COUNTER_APP, env={"OPENENV_RESUME_GRACE": "30"}, in_process=True) as server:
        yield server
