"""The Docker Swarm provider on a real single-node swarm: an episode in a hardened service,
scaling, and nothing left behind by a stop, a failed start or a trainer killed with SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from echo_env import CallToolAction, EchoEnv
from openenv.providers import EnvironmentStartError, SpecError
from openenv.providers.ownership import Owner
from openenv.providers.swarm import DockerSwarmProvider
from tests.providers.leaks import assert_nothing_leaks
from tests.support.server import REPO

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def services(name: str) -> list[str]:
    out = subprocess.run(
        ["docker", "service", "ls", "--filter", f"name={name}", "--format", "{{.Name}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [n for n in out.stdout.split() if n == name]


def task_containers(name: str) -> list[str]:
    out = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--filter",
            f"label=com.docker.swarm.service.name={name}",
            "--format",
            "{{.Names}}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def mine() -> list[str]:
    me = Owner.current()
    return [r.id for r in DockerSwarmProvider.resources() if r.owner == me]


def wait_until(condition: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def test_an_episode_in_a_hardened_service(docker_client: Any, swarm: None, echo_image: str) -> None:
    provider = DockerSwarmProvider()
    with provider:
        url = provider.start_container(
            echo_image, env_vars={"OPENENV_TEST_MARK": "7"}, limits={"memory_mb": 256, "pids": 64}
        )
        provider.wait_for_ready(url, timeout_s=120)
        (env,) = provider.started()
        assert env.info["replicas"] == 1
        with EchoEnv(base_url=env.base_url).sync() as client:
            client.reset()
            step = client.step(
                CallToolAction(tool_name="echo_message", arguments={"message": "hi"})
            )
            assert step.observation.result["data"] == "hi"

        container = docker_client.containers.get(env.info["container_id"])
        code, out = container.exec_run(["cat", "/proc/1/status"])
        assert code == 0
        status = dict(line.split(":\t", 1) for line in out.decode().splitlines() if ":\t" in line)
        assert status["CapBnd"].strip() == "0000000000000000"
        assert status["Uid"].split()[0] == "65534"
        # no-new-privileges only where the engine's API offers it for services (1.46+).
        assert status["NoNewPrivs"].strip() == ("1" if env.info["no_new_privileges"] else "0")
        code, _ = container.exec_run(["sh", "-c", "echo x > /etc/openenv-test"])
        assert code != 0, "the root file system is writable"
        _, out = container.exec_run(["sh", "-c", "echo $OPENENV_TEST_MARK; echo y > /tmp/y"])
        assert out.decode().strip() == "7"

        service = docker_client.services.get(env.id).attrs["Spec"]
        limits = service["TaskTemplate"]["Resources"]["Limits"]
        assert limits["MemoryBytes"] == 256 * 1024 * 1024
        assert limits["Pids"] == 64
        assert service["TaskTemplate"]["ContainerSpec"]["CapabilityDrop"] == ["ALL"]
        assert service["TaskTemplate"]["RestartPolicy"]["Condition"] == "none"
        assert Owner.from_labels(service["Labels"]) == Owner.current()
        assert service["Labels"]["org.openenv.provider"] == "swarm"

        provider.scale(env, 2)
        assert wait_until(lambda: provider.running_replicas(env) == 2)
        provider.scale(env, 1)
        assert wait_until(lambda: provider.running_replicas(env) == 1)
        provider.stop_container()
    assert services(env.id) == []
    assert task_containers(env.id) == []


async def test_a_failed_start_leaves_nothing(
    docker_client: Any, swarm: None, echo_image: str
) -> None:
    provider = DockerSwarmProvider(command=["python", "-c", "print('no config'); exit(3)"])
    with pytest.raises(EnvironmentStartError):
        await provider.start(echo_image)
    assert mine() == []
    with pytest.raises(SpecError, match="network 'none'"):
        await provider.start(echo_image, network="none")
    assert mine() == []


TRAINER = """
import asyncio, sys, time
from openenv.providers.swarm import DockerSwarmProvider

async def main():
    env = await DockerSwarmProvider().start(sys.argv[1])
    print(env.id, flush=True)
    time.sleep(600)

asyncio.run(main())
"""


def test_a_sigkilled_trainer_leaves_an_orphan_that_gc_removes(
    docker_client: Any, swarm: None, echo_image: str
) -> None:
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, echo_image], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert trainer.stdout is not None
        name = trainer.stdout.readline().strip()
        assert name, "the trainer printed no service"
        assert services(name) == [name]
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    orphan = next(r for r in DockerSwarmProvider.resources() if r.id == name)
    assert orphan.orphaned and orphan.owner is not None and orphan.owner.pid == trainer.pid
    removed = DockerSwarmProvider.collect_orphans()
    assert name in [r.id for r in removed]
    assert services(name) == []
    assert task_containers(name) == []


@pytest.mark.parametrize("ending", ["sigkill", "sigterm", "exit"])
def test_nothing_leaks(
    docker_client: Any, swarm: None, echo_image: str, ending: str, tmp_path: Any
) -> None:
    def left(trainer: Any) -> list[str]:
        name = trainer.report["id"]
        return [f"service {n}" for n in services(name)] + [
            f"container {n}" for n in task_containers(name)
        ]

    assert_nothing_leaks(
        "swarm", echo_image, ending, state_dir=tmp_path / "state", extra_check=left
    )
