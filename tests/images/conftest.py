"""A real Docker engine for the image tests, which run with `pytest -m docker`.

Outside CI a machine without an engine skips these tests; in CI (`CI=true`) a missing engine
fails them, since `.ci/run` installs and starts one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from openenv.providers._docker import HARDENING
from tests.support.docker_engine import engine_client

docker = pytest.importorskip("docker")

#: Per-test bound for image tests: a build (or its first use in a fixture) takes minutes on a
#: loaded machine, past the suite's 120 s default; `openenv build` has its own 900 s bound.
IMAGE_TEST_TIMEOUT_S = 1200


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.timeout(IMAGE_TEST_TIMEOUT_S))
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    yield from engine_client()


def run_hardened(client: Any, image: str) -> Any:
    """A container of `image` run the way the docs and `openenv build` say: no capabilities,
    no-new-privileges, a read-only root with a tmpfs /tmp, the port on loopback."""
    return client.containers.run(
        image, detach=True, ports={"8000/tcp": ("127.0.0.1", None)}, **HARDENING
    )


def published_url(container: Any, port: str = "8000/tcp") -> str:
    container.reload()
    binding = container.attrs["NetworkSettings"]["Ports"][port][0]
    return f"http://127.0.0.1:{binding['HostPort']}"


def wait_for_health(container: Any, url: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        container.reload()
        if container.status == "exited":
            logs = container.logs().decode(errors="replace")[-2000:]
            raise AssertionError(f"container exited:\n{logs}")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} not healthy after {timeout} s")
