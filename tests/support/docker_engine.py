"""The Docker engine the image and container-provider tests run against.

Outside CI a machine without an engine skips those tests; in CI (`CI=true`) a missing engine
fails them, since `.ci/run` installs and starts one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


def engine_client() -> Iterator[Any]:
    """Body of a session fixture: a connected `docker` client, closed afterwards."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs a running Docker engine (.ci/run starts one): {exc}")
        pytest.skip(f"no Docker engine here: {exc}")
    yield client
    client.close()
