"""The Ray provider on a real two-node Ray cluster on this machine.

Both nodes are `ray start` processes (a head and a second node joined to it, with `--block`,
so ending them ends their node), each with its own custom resource (`node_a`, `node_b`) to
place environments on it. Episodes run on both nodes; an actor's worker killed mid-episode and
then a whole node killed mid-episode each give the client a typed infrastructure error, Ray
restarts the server, and a new episode works on it; nothing is left after close or after a
trainer killed with SIGKILL and one `openenv gc`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from echo_env import CallToolAction, EchoEnv
from openenv.core.errors import is_infrastructure_error
from openenv.core.generic_client import GenericEnvClient
from openenv.providers import (
    PROVIDERS,
    EnvironmentStartError,
    ProviderUnavailableError,
    SpecError,
    get_provider,
)
from openenv.providers.ownership import Owner, process_alive
from openenv.providers.records import session_members
from tests.providers.leaks import ECHO_STEP, end_trainer, leftovers, run_gc, start_trainer

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (uv sync --extra ray)")
RAY = str(Path(sys.executable).with_name("ray"))
RAY_AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def test_registered_and_lazy() -> None:
    assert PROVIDERS["ray"] == "openenv.providers.ray:RayProvider"
    from openenv.providers import RayProvider

    assert RayProvider.name == "ray"


def test_says_what_to_install_without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    from openenv.providers.ray import RayProvider

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    with pytest.raises(ProviderUnavailableError, match=r"pip install 'openenv\[ray\]'"):
        RayProvider.check_available()
    assert RayProvider.resources() == []


def test_refuses_limits_ray_cannot_enforce(monkeypatch: pytest.MonkeyPatch) -> None:
    from openenv.providers.ray import RayProvider

    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # no cluster is needed to refuse

    provider = RayProvider()
    for limits in ({"pids": 10}, {"wall_time_s": 5}):
        with pytest.raises(SpecError, match="not enforced by Ray"):
            asyncio.run(provider.start("echo", limits=limits))
    with pytest.raises(SpecError, match="network='none'"):
        asyncio.run(provider.start("echo", network="none"))


def test_ps_lists_nothing_without_a_named_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """`openenv ps` must not start a Ray cluster to look into it."""
    from openenv.providers.ray import RayProvider

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # Not imported here: Ray reads its token settings once, when first imported (the cluster
    # fixture sets them first).
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        pytest.skip("this process already joined a Ray cluster")
    assert RayProvider.resources() == []
    assert "ray" not in sys.modules or ray is not None  # listing nothing imported nothing


# -- the two-node cluster --------------------------------------------------------------------


@dataclass
class Node:
    process: subprocess.Popen[bytes]
    resource: str

    def kill(self) -> None:
        """End the node: its `ray start --block`, then whatever of its session is left."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        deadline = time.monotonic() + 10
        while (left := session_members(self.process.pid)) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)


@dataclass
class Cluster:
    address: str
    head: Node
    second: Node
    node_ids: dict[str, str]


def _ray_start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [RAY, "start", "--block", "--disable-usage-stats", "--num-cpus=2", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
        )


def _wait_for(condition: Any, timeout_s: float, what: str, log: Path) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout_s} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A head node and a second node (`ray start`), joined, on this machine."""
    if not HAS_RAY:
        pytest.skip("ray is not installed (uv sync --extra ray)")
    # A token of this cluster's own, for the nodes, this process and the trainers it starts
    # (Ray's default, ~/.ray/auth_token, is shared with whatever else runs Ray here).
    saved = {k: os.environ.get(k) for k in ("RAY_ADDRESS", *RAY_AUTH_VARIABLES)}
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    assert "ray" not in sys.modules, "ray was imported before its token settings were made"
    import ray

    # Ray's socket paths must stay under 107 bytes: a short folder of our own.
    temp = Path(f"/tmp/oe-ray-{os.getpid()}")
    temp.mkdir(exist_ok=True)
    log = tmp_path_factory.mktemp("ray") / "nodes.log"
    head = Node(
        _ray_start(
            [
                "--head",
                "--port=0",
                f"--temp-dir={temp}",
                "--include-dashboard=false",
                '--resources={"node_a": 100}',
            ],
            log,
        ),
        "node_a",
    )
    second: Node | None = None
    try:
        address_file = temp / "ray_current_cluster"
        address = _wait_for(
            lambda: address_file.exists() and address_file.read_text().strip(),
            120,
            "the head node did not start",
            log,
        )
        second = Node(
            _ray_start([f"--address={address}", '--resources={"node_b": 100}'], log), "node_b"
        )
        os.environ["RAY_ADDRESS"] = address
        ray.init(address=address, namespace="openenv", log_to_driver=False)

        def joined() -> dict[str, str]:
            nodes = [n for n in ray.nodes() if n["Alive"]]
            by_resource = {
                r: n["NodeID"] for n in nodes for r in ("node_a", "node_b") if r in n["Resources"]
            }
            return by_resource if len(by_resource) == 2 else {}

        node_ids = _wait_for(joined, 120, "the second node did not join", log)
        yield Cluster(address, head, second, node_ids)
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        for node in (second, head):
            if node is not None:
                node.kill()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        subprocess.run(["rm", "-rf", str(temp)], check=False)


def mine() -> list[str]:
    from openenv.providers.ray import RayProvider

    me = Owner.current()
    return [r.id for r in RayProvider.resources() if r.owner == me]


async def echo_episode(base_url: str) -> str:
    async with GenericEnvClient(base_url=base_url) as client:
        await client.reset()
        result = await client.step(ECHO_STEP)
    text: str = result.observation["result"]["data"]
    return text


@pytest.fixture()
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv("OPENENV_STATE_DIR", str(folder))
    return folder


@needs_ray
@pytest.mark.slow
def test_episodes_on_both_nodes(cluster: Cluster) -> None:
    from openenv.providers.ray import RayProvider

    async def main() -> None:
        async with (
            RayProvider(resources={"node_a": 1}) as on_a,
            RayProvider(resources={"node_b": 1}) as on_b,
        ):
            env_a = await on_a.start("echo", limits={"cpus": 0.5, "memory_mb": 256})
            env_b = await on_b.start("echo")
            assert env_a.info["node_id"] == cluster.node_ids["node_a"]
            assert env_b.info["node_id"] == cluster.node_ids["node_b"]
            # Same machine as the trainer: the servers bind loopback.
            assert env_a.base_url.startswith("http://127.0.0.1:")
            assert await echo_episode(env_a.base_url) == "hi"
            assert await echo_episode(env_b.base_url) == "hi"
            assert {env_a.id, env_b.id} <= set(mine())

            # One placement group spreading two servers: one on each node.
            spread = RayProvider()
            pair = await spread.start_many("echo", 2, strategy="STRICT_SPREAD")
            assert {e.info["node_id"] for e in pair} == set(cluster.node_ids.values())
            for env in pair:
                assert await echo_episode(env.base_url) == "hi"
            group = pair[0].info["placement_group"]
            await spread.close()
            import ray

            assert ray.util.placement_group_table()[group]["state"] == "REMOVED"

            # A start no node can take fails in its timeout and leaves no actor behind.
            with pytest.raises(EnvironmentStartError, match="resources"):
                await RayProvider(resources={"no_such_node": 1}).start("echo", ready_timeout_s=3)
            assert isinstance(await on_a.log_tail(env_a), str)
        assert not mine()

    asyncio.run(main())


@needs_ray
@pytest.mark.slow
def test_a_killed_actor_fails_the_episode_and_ray_restarts_it(cluster: Cluster) -> None:
    from openenv.providers.ray import RayProvider

    async def main() -> None:
        provider = RayProvider(max_restarts=2)
        async with provider:
            client = await EchoEnv.from_env("echo", provider=provider)
            (env,) = provider.started()
            old_url, old_pid = env.base_url, env.info["pid"]
            await client.reset()
            await client.step(CallToolAction(tool_name="echo_message", arguments={"message": "a"}))

            os.kill(old_pid, signal.SIGKILL)  # the actor's worker process, mid-episode
            with pytest.raises(Exception) as caught:
                await client.step(
                    CallToolAction(tool_name="echo_message", arguments={"message": "b"})
                )
            assert is_infrastructure_error(caught.value), repr(caught.value)

            await provider.wait_restarted(env)
            assert env.info["restarts"] == 1
            assert env.info["pid"] != old_pid and env.base_url != old_url
            assert await provider.is_running(env)
            assert await echo_episode(env.base_url) == "hi"
            await client.close()  # the client owns the environment: this stops it
            assert not provider.started()
        assert not mine()

    asyncio.run(main())


@needs_ray
@pytest.mark.slow
def test_a_trainer_killed_with_sigkill_leaves_nothing(cluster: Cluster, state_dir: Path) -> None:
    trainer = start_trainer(
        "ray", "echo", "sigkill", state_dir=state_dir, provider_kwargs={"address": cluster.address}
    )
    worker_pid = trainer.report["info"]["pid"]
    assert process_alive(worker_pid, None)
    assert trainer.report["id"] in [r.id for r in get_provider("ray").resources()]
    end_trainer(trainer, "sigkill")
    gc = run_gc(state_dir)
    assert gc.returncode == 0, gc.stdout + gc.stderr

    def worker_left(_: Any) -> list[str]:
        deadline = time.monotonic() + 30  # Ray reaps a dead driver's actors on its own clock
        while process_alive(worker_pid, None) and time.monotonic() < deadline:
            time.sleep(0.2)
        return [f"actor worker {worker_pid}"] if process_alive(worker_pid, None) else []

    assert not leftovers(trainer, "ray", worker_left)


@needs_ray
@pytest.mark.slow
def test_a_fleet_spreads_over_both_nodes_and_replaces_what_ray_lost(cluster: Cluster) -> None:
    """The trainer's fleet code unchanged on Ray: servers on both nodes, sessions on each; the
    second node's servers killed mid-episode fail only their slots, as infrastructure."""
    from openenv.fleet import EnvFleet, ServerLostError
    from openenv.providers.ray import RayProvider

    step = CallToolAction(tool_name="echo_message", arguments={"message": "hi"})

    async def main() -> None:
        async with (
            RayProvider(address=cluster.address, max_restarts=2) as provider,
            EnvFleet(
                "echo",
                client=EchoEnv,
                provider=provider,
                servers=2,
                sessions_per_server=2,
                health_interval_s=0.5,
            ) as fleet,
        ):
            servers = fleet.servers()
            assert {s.info["node_id"] for s in servers} == set(cluster.node_ids.values())
            vec = await fleet.vector(4)
            placed = [fleet.server_of(c) for c in vec.sessions if c is not None]
            node_of = [env.info["node_id"] for env in placed if env is not None]
            assert len(node_of) == 4
            assert set(node_of) == set(cluster.node_ids.values())
            assert all((await vec.reset()).ok)
            assert all((await vec.step([step] * 4)).ok)

            on_b = [s for s in servers if s.info["node_id"] == cluster.node_ids["node_b"]]
            for server in on_b:
                os.kill(server.info["pid"], signal.SIGKILL)  # its actor's worker, mid-episode
            batch = await vec.step([step] * 4)
            lost = [i for i, node in enumerate(node_of) if node == cluster.node_ids["node_b"]]
            for i, slot in enumerate(batch):
                if i in lost:
                    assert isinstance(slot.error, ServerLostError), repr(slot.error)
                    assert slot.infrastructure_failure and slot.result is None
                else:
                    assert slot.ok and slot.result is not None
                    assert slot.result.observation.result.data == "hi"  # type: ignore[attr-defined]

            # The fleet replaces the lost server with a new actor; the slots reset onto it.
            for _ in range(600):  # up to 120 s
                if fleet.stats().servers == 2:
                    break
                await asyncio.sleep(0.2)
            stats = fleet.stats()
            assert (stats.servers, stats.servers_lost) == (2, len(on_b))
            assert not {s.id for s in on_b} & {s.id for s in fleet.servers()}
            assert all((await vec.reset(indices=lost)).ok)
            assert all((await vec.step([step] * 4)).ok)
            await vec.close()
        assert not mine()

    asyncio.run(main())


@needs_ray
@pytest.mark.slow
def test_a_lost_node_fails_the_episode_and_ray_restarts_elsewhere(cluster: Cluster) -> None:
    """Runs last: it takes the second node away for good."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from openenv.providers.ray import RayProvider

    async def main() -> None:
        provider = RayProvider(
            max_restarts=2,
            scheduling_strategy=NodeAffinitySchedulingStrategy(
                cluster.node_ids["node_b"], soft=True
            ),
        )
        async with provider:
            client = await EchoEnv.from_env("echo", provider=provider)
            (env,) = provider.started()
            assert env.info["node_id"] == cluster.node_ids["node_b"]
            await client.reset()

            await asyncio.to_thread(cluster.second.kill)
            with pytest.raises(Exception) as caught:
                await client.step(
                    CallToolAction(tool_name="echo_message", arguments={"message": "b"})
                )
            assert is_infrastructure_error(caught.value), repr(caught.value)

            await provider.wait_restarted(env, timeout_s=120)
            assert env.info["node_id"] == cluster.node_ids["node_a"]
            assert await echo_episode(env.base_url) == "hi"
            await client.close()
        assert not mine()

    asyncio.run(main())
