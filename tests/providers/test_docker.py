"""The Docker provider on a real engine: an episode, the hardening seen from inside the
container, limits and labels, and nothing left behind by a stop, a failed start or a trainer
killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from echo_env import CallToolAction, EchoEnv
from openenv.providers import EnvironmentStartError, SpecError
from openenv.providers.docker import DockerProvider, LocalDockerProvider
from openenv.providers.ownership import Owner
from tests.providers.leaks import ENDINGS, assert_nothing_leaks
from tests.support.server import REPO

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def listed(name: str) -> list[str]:
    """Names the engine lists for `name` (the provider's own check, made here by hand)."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"name=^/{name}$", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def mine() -> list[str]:
    """Containers of this provider kind that this test process owns."""
    me = Owner.current()
    return [r.id for r in DockerProvider.resources() if r.owner == me]


def wait_until(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)


def status_fields(container: Any) -> dict[str, str]:
    code, out = container.exec_run(["cat", "/proc/1/status"])
    assert code == 0, out
    return dict(line.split(":\t", 1) for line in out.decode().splitlines() if ":\t" in line)


async def test_an_episode_in_a_hardened_container(docker_client: Any, echo_image: str) -> None:
    provider = DockerProvider()
    env = await provider.start(
        echo_image,
        env_vars={"OPENENV_TEST_MARK": "42"},
        limits={"cpus": 0.5, "memory_mb": 256, "pids": 64},
    )
    try:
        async with EchoEnv(base_url=env.base_url) as client:
            await client.reset()
            step = await client.step(
                CallToolAction(tool_name="echo_message", arguments={"message": "hi"})
            )
            assert step.observation.result["data"] == "hi"

        container = docker_client.containers.get(env.id)
        status = status_fields(container)
        # The bounding set, not the CapDrop list: nothing can be regained, even by exec.
        assert status["CapBnd"].strip() == "0000000000000000"
        assert status["CapEff"].strip() == "0000000000000000"
        assert status["NoNewPrivs"].strip() == "1"
        assert status["Uid"].split()[0] == "65534"
        code, _ = container.exec_run(["sh", "-c", "echo x > /etc/openenv-test"])
        assert code != 0, "the root file system is writable"
        code, out = container.exec_run(["sh", "-c", "echo x > /tmp/f && echo $HOME"])
        assert code == 0 and out.decode().strip() == "/tmp"
        code, out = container.exec_run(["sh", "-c", "echo $OPENENV_TEST_MARK"])
        assert out.decode().strip() == "42"

        host = container.attrs["HostConfig"]
        assert host["Memory"] == 256 * 1024 * 1024
        assert host["NanoCpus"] == 500_000_000
        assert host["PidsLimit"] == 64
        assert host["ReadonlyRootfs"] is True
        assert host["PortBindings"]["8000/tcp"][0]["HostIp"] == "127.0.0.1"
        assert container.attrs["Config"]["StopTimeout"] == 0
        labels = container.labels
        assert Owner.from_labels(labels) == Owner.current()
        assert labels["org.openenv.provider"] == "docker"
        assert labels["org.openenv.target"] == echo_image
        assert env.base_url.startswith("http://127.0.0.1:")
        assert env.id in mine()
    finally:
        await provider.stop(env)
    assert listed(env.id) == []
    assert env.id not in mine()


async def test_network_none_serves_on_a_unix_socket(docker_client: Any, echo_image: str) -> None:
    provider = DockerProvider()
    env = await provider.start(echo_image, network="none")
    socket_dir = os.path.dirname(os.path.dirname(env.unix_socket or ""))
    try:
        assert env.unix_socket and await asyncio.to_thread(os.path.exists, env.unix_socket)
        async with EchoEnv(**env.client_kwargs()) as client:
            await client.reset()
            step = await client.step(
                CallToolAction(tool_name="echo_message", arguments={"message": "no net"})
            )
            assert step.observation.result["data"] == "no net"
        transport = httpx.AsyncHTTPTransport(uds=env.unix_socket)
        async with httpx.AsyncClient(
            transport=transport, base_url=env.base_url, timeout=10
        ) as http:
            assert (await http.get("/health")).status_code == 200
        container = docker_client.containers.get(env.id)
        assert container.attrs["HostConfig"]["NetworkMode"] == "none"
        assert container.attrs["HostConfig"]["PortBindings"] in ({}, None)
        _, out = container.exec_run(["ls", "/sys/class/net"])
        assert out.decode().split() == ["lo"]
    finally:
        await provider.stop(env)
    assert listed(env.id) == []
    assert not await asyncio.to_thread(os.path.exists, socket_dir)


async def test_a_missing_image_is_a_spec_error(docker_client: Any) -> None:
    provider = DockerProvider()
    with pytest.raises(SpecError, match="not on this machine"):
        await provider.start("openenv-no-such-image:never")
    assert mine() == []


async def test_an_environment_that_exits_leaves_nothing(
    docker_client: Any, echo_image: str
) -> None:
    command = ["python", "-c", "import sys; print('bad config'); sys.exit(3)"]
    provider = DockerProvider(command=command)
    with pytest.raises(EnvironmentStartError, match="exited before it was ready") as err:
        await provider.start(echo_image)
    assert "bad config" in err.value.log_tail
    assert mine() == []
    assert provider.started() == []


async def test_an_environment_never_ready_leaves_nothing(
    docker_client: Any, echo_image: str
) -> None:
    provider = DockerProvider(command=["sleep", "600"])
    with pytest.raises(EnvironmentStartError, match="not healthy after"):
        await provider.start(echo_image, ready_timeout_s=2)
    assert mine() == []


@pytest.mark.parametrize("when", ["creating", "waiting"])
async def test_a_cancelled_start_leaves_nothing(
    docker_client: Any, echo_image: str, when: str
) -> None:
    provider = DockerProvider()
    await asyncio.to_thread(DockerProvider.collect_orphans)  # as a first start would
    task = asyncio.ensure_future(provider.start(echo_image))
    if when == "creating":
        await asyncio.sleep(0.02)  # the engine is creating the container
    else:
        await asyncio.to_thread(wait_until, lambda: bool(mine()))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await provider.close()  # waits for the removal of what a cancelled start created
    assert mine() == []


async def test_the_wall_time_removes_the_container(docker_client: Any, echo_image: str) -> None:
    provider = DockerProvider()
    # No wait for health: on a loaded machine the server may not be ready within its wall time.
    env = await provider.start(echo_image, wait=False, limits={"wall_time_s": 3})
    assert listed(env.id) == [env.id]
    await asyncio.to_thread(wait_until, lambda: not listed(env.id))
    assert listed(env.id) == []
    assert provider.started() == []
    assert not await provider.is_running(env)


async def test_gc_removes_a_container_past_its_wall_time(
    docker_client: Any, echo_image: str
) -> None:
    provider = DockerProvider()
    env = await provider.start(echo_image, wait=False, limits={"wall_time_s": 2})
    # As if the owner's timer never fired (a stuck trainer): the deadline label remains.
    provider._timers.pop(env.id).cancel()
    deadline = float(docker_client.containers.get(env.id).labels["org.openenv.deadline"])
    await asyncio.sleep(max(0.0, deadline - time.time()) + 0.2)
    assert listed(env.id) == [env.id]
    removed = await asyncio.to_thread(DockerProvider.collect_orphans)
    assert env.id in [r.id for r in removed]
    assert listed(env.id) == []


TRAINER = """
import asyncio, sys, time
from openenv.providers.docker import DockerProvider

async def main():
    env = await DockerProvider().start(sys.argv[1])
    print(env.id, flush=True)
    time.sleep(600)

asyncio.run(main())
"""


def test_a_sigkilled_trainer_leaves_an_orphan_that_gc_removes(
    docker_client: Any, echo_image: str
) -> None:
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, echo_image],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert trainer.stdout is not None
        name = trainer.stdout.readline().strip()
        assert name, "the trainer printed no container"
        assert listed(name) == [name]
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    orphan = next(r for r in DockerProvider.resources() if r.id == name)
    assert orphan.owner is not None and orphan.owner.pid == trainer.pid
    assert orphan.orphaned
    removed = DockerProvider.collect_orphans()
    assert name in [r.id for r in removed]
    assert listed(name) == []


def test_a_trainer_that_exits_without_stopping_leaves_nothing(
    docker_client: Any, echo_image: str
) -> None:
    script = TRAINER.replace("time.sleep(600)", "").replace(
        "asyncio.run(main())", "asyncio.run(main())\nprint('exiting', flush=True)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, echo_image],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    name, exiting = out.stdout.split()
    assert exiting == "exiting"
    assert listed(name) == []


def test_openenv_compat_methods(docker_client: Any, echo_image: str) -> None:
    provider = LocalDockerProvider()
    url = provider.start_container(echo_image, env_vars={"A": "1"})
    provider.wait_for_ready(url, timeout_s=120)
    (env,) = provider.started()
    with EchoEnv(base_url=url).sync() as client:
        client.reset()
        step = client.step(CallToolAction(tool_name="echo_message", arguments={"message": "x"}))
        assert step.observation.result["data"] == "x"
    provider.stop_container()
    assert listed(env.id) == []


async def test_from_docker_image_owns_its_container(docker_client: Any, echo_image: str) -> None:
    async with EchoEnv.from_docker_image(echo_image, limits={"memory_mb": 512}) as client:
        await client.reset()
        step = await client.step(
            CallToolAction(tool_name="echo_message", arguments={"message": "owned"})
        )
        assert step.observation.result["data"] == "owned"
        (name,) = mine()
        assert docker_client.containers.get(name).attrs["HostConfig"]["Memory"] == 512 << 20
    assert listed(name) == []


async def test_a_container_killed_mid_episode_is_an_infrastructure_error(
    docker_client: Any, echo_image: str
) -> None:
    from openenv.core.errors import is_infrastructure_error

    async with EchoEnv.from_docker_image(echo_image) as client:
        await client.reset()
        (name,) = mine()
        docker_client.containers.get(name).kill()
        with pytest.raises(Exception) as err:
            await client.step(CallToolAction(tool_name="echo_message", arguments={"message": "x"}))
        assert is_infrastructure_error(err.value), repr(err.value)
    assert listed(name) == []


@pytest.mark.parametrize("ending", ENDINGS)
def test_nothing_leaks(docker_client: Any, echo_image: str, ending: str, tmp_path: Any) -> None:
    def left_containers(trainer: Any) -> list[str]:
        name = trainer.report["id"]
        return [f"container {n}" for n in listed(name)]

    assert_nothing_leaks(
        "docker", echo_image, ending, state_dir=tmp_path / "state", extra_check=left_containers
    )
