"""`from_env` / `from_docker_image` / `AutoEnv.from_env` with OpenEnv's signatures and providers.

The OpenEnv-style provider here is a real one written the way OpenEnv users write theirs (a
`ContainerProvider` subclass); it runs the echo server as a process rather than a container so
that these tests need no Docker engine (the Docker provider has its own tests).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any, Optional

import pytest

from echo_env import EchoEnv
from openenv.core.containers.runtime import ContainerProvider
from openenv.core.generic_client import GenericEnvClient
from openenv.providers import get_provider
from openenv.providers.ownership import process_alive
from tests.providers.test_local import PROBE, gone, started_env


@pytest.fixture(autouse=True)
def _private_state(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENENV_STATE_DIR", str(tmp_path / "state"))


class ProcessAsContainer(ContainerProvider):
    """An OpenEnv-style provider: one environment per instance, synchronous methods."""

    def __init__(self) -> None:
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.calls: list[str] = []

    def start_container(
        self,
        image: str,
        port: Optional[int] = None,
        env_vars: Optional[dict[str, str]] = None,
        **kwargs: Any,
    ) -> str:
        self.calls.append(f"start {image}")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "echo_env.server.app", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return f"http://127.0.0.1:{port}"

    def wait_for_ready(self, base_url: str, timeout_s: float = 30.0) -> None:
        self.calls.append(f"wait {timeout_s:g}")
        super().wait_for_ready(base_url, timeout_s)

    def stop_container(self) -> None:
        self.calls.append("stop")
        if self.process is not None:
            self.process.kill()
            self.process.wait()


async def test_from_docker_image_accepts_an_openenv_style_provider() -> None:
    provider = ProcessAsContainer()
    client = await EchoEnv.from_docker_image("echo-env:latest", provider=provider, wait_timeout=90)
    try:
        await client.reset()
        assert await client.call_tool("echo_message", message="compat") == "compat"
    finally:
        await client.close()
    # wait_timeout is the readiness timeout (OpenEnv forwarded it to start_container instead).
    assert provider.calls == ["start echo-env:latest", "wait 90", "stop"]
    assert provider.process is not None and provider.process.poll() is not None


async def test_pending_client_awaits_enters_and_closes() -> None:
    pending = GenericEnvClient.from_env(PROBE, provider="local")
    client = await pending
    pid = started_env(client).info["pid"]
    assert client.supports_resume  # connected on await
    await client.close()
    assert gone(pid)

    async with GenericEnvClient.from_env(PROBE) as entered:
        pid = started_env(entered).info["pid"]
        assert process_alive(pid, None)
    assert gone(pid)


async def test_a_provider_instance_is_shared_and_not_closed_by_its_clients() -> None:
    provider = get_provider("local")
    first = await GenericEnvClient.from_env(PROBE, provider=provider)
    second = await GenericEnvClient.from_env(PROBE, provider=provider)
    assert len(provider.started()) == 2
    await first.close()
    assert [env.id for env in provider.started()] == [started_env(second).id]
    await second.close()
    assert provider.started() == []


def test_unknown_keyword_arguments_are_refused_with_the_valid_ones() -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'memory'.*limits"):
        GenericEnvClient.from_env(PROBE, memory=512).sync()


def test_sync_client_of_a_started_environment_stops_it_even_if_never_used() -> None:
    sync = GenericEnvClient.from_env(PROBE).sync()
    pid = started_env(sync.async_client).info["pid"]
    sync.close()
    assert gone(pid)
