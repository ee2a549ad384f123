"""The local process provider, for real: a warm fork server, child processes, cgroups, records.

Every test starts real environment servers and talks to them over real sockets. The probe app
(`tests/apps/probe.py`) runs a snippet inside the environment, so the tests look at it from the
inside (its variables, its limits, what it started).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from openenv.auto import AutoEnv
from openenv.core.errors import is_infrastructure_error
from openenv.core.generic_client import GenericEnvClient
from openenv.isolation import cgroups
from openenv.providers import (
    EnvironmentDiedError,
    EnvironmentStartError,
    SpecError,
    StartedEnv,
    get_provider,
)
from openenv.providers.launch import ProviderOwner
from openenv.providers.local import LocalProcessProvider, runtime_dir
from openenv.providers.ownership import local_records, process_alive
from tests.support.pycache import PYCACHE_ENV

REPO = Path(__file__).resolve().parents[2]
PROBE = "tests.apps.probe:app"
needs_cgroups = pytest.mark.skipif(
    cgroups.mode() is None, reason="no writable cgroup hierarchy on this machine"
)


@pytest.fixture(autouse=True)
def _private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test lists only the resources it made."""
    monkeypatch.setenv("OPENENV_STATE_DIR", str(tmp_path / "state"))


def gone(pid: int, within_s: float = 30.0) -> bool:
    """True once `pid` has exited (bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not process_alive(pid, None):
            return True
        time.sleep(0.05)
    return False


def started_env(client: Any) -> StartedEnv:
    """The environment a client's provider started for it (what its owner stops)."""
    owner = client.owner
    assert isinstance(owner, ProviderOwner), owner
    return owner.env


def children_of(pid: int) -> list[int]:
    """Processes whose parent is `pid`, from /proc (no procps on a minimal machine)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry))
    return found


def exists(path: str | Path) -> bool:
    return os.path.exists(path)


async def probe(client: GenericEnvClient, code: str) -> str:
    result = await client.step({"code": textwrap.dedent(code)})
    observation = result.observation
    assert not observation.get("error"), observation["error"]
    return str(observation["output"])


async def test_episode_then_close_leaves_nothing() -> None:
    async with GenericEnvClient.from_env(PROBE, env_vars={"PROBE_SETTING": "42"}) as client:
        reset = await client.reset()
        server_pid = int(reset.observation["output"])
        assert await probe(client, "result = os.environ['PROBE_SETTING']") == "42"
        assert await probe(client, "result = os.getppid() != 1") == "True"
        (record,) = local_records()
        assert record.pid == server_pid and record.provider == "local"
        folder = Path(record.cleanup_paths[0])
        assert folder.parent == runtime_dir() and exists(folder)
    assert gone(server_pid)
    assert list(local_records()) == []
    assert not exists(folder)


async def test_processes_the_environment_started_die_with_it() -> None:
    async with GenericEnvClient.from_env(PROBE) as client:
        await client.reset()
        same_group = int(await probe(client, "result = subprocess.Popen(['sleep', '300']).pid"))
        own_session = None
        if cgroups.mode() is not None:
            # Escapes the process group: only the cgroup still holds it.
            own_session = int(
                await probe(
                    client,
                    "result = subprocess.Popen(['sleep', '300'], start_new_session=True).pid",
                )
            )
    assert gone(same_group)
    if own_session is not None:
        assert gone(own_session)


@needs_cgroups
async def test_limits_hold_for_the_whole_tree_and_the_server_survives_a_fork_bomb() -> None:
    limits = {"memory_mb": 200, "pids": 40}
    async with GenericEnvClient.from_env(PROBE, limits=limits) as client:
        await client.reset()
        bomb = await client.step(
            {
                "code": textwrap.dedent(
                    """
                    children = []
                    try:
                        for _ in range(200):
                            children.append(subprocess.Popen(['sleep', '60']))
                    finally:
                        result = len(children)
                        for child in children:
                            child.kill()
                            child.wait()
                    """
                )
            }
        )
        assert (
            "BlockingIOError" in bomb.observation["error"]
            or "Resource" in (bomb.observation["error"])
        )
        # The session is still usable after the pids ceiling refused the bomb.
        assert await probe(client, "result = 1 + 1") == "2"
        with pytest.raises(EnvironmentDiedError) as died:
            await client.step({"code": "hog = bytearray(600 * 1024 * 1024); result = len(hog)"})
        assert is_infrastructure_error(died.value)


async def test_wall_time_stops_the_environment_and_the_client_says_so() -> None:
    client = await GenericEnvClient.from_env(PROBE, limits={"wall_time_s": 1})
    try:
        reset = await client.reset()
        assert gone(int(reset.observation["output"]))
        with pytest.raises(EnvironmentDiedError, match="is gone"):
            await client.step({"code": "result = 1"})
    finally:
        await client.close()
    assert list(local_records()) == []


async def test_start_failures_are_typed_and_leave_nothing() -> None:
    provider = LocalProcessProvider()
    with pytest.raises(EnvironmentStartError, match="no_such_module"):
        await provider.start("tests.apps.no_such_module:app")
    with pytest.raises(SpecError, match="sandbox"):
        await provider.start(PROBE, network="none")
    with pytest.raises(SpecError, match="neither an environment folder"):
        await provider.start("/no/such/folder")
    assert provider.started() == [] and list(local_records()) == []


async def test_unix_socket_transport_and_folder_targets() -> None:
    from echo_env import EchoEnv

    provider = LocalProcessProvider(transport="unix")
    async with EchoEnv.from_env(str(REPO / "envs" / "echo_env"), provider=provider) as env:
        assert env.unix_socket and exists(env.unix_socket)
        await env.reset()
        assert await env.call_tool("echo_message", message="over a socket") == "over a socket"
    assert provider.started() == []


async def test_many_at_once_are_distinct_and_all_stopped() -> None:
    provider = get_provider("local")
    started = await asyncio.gather(*(provider.start(PROBE) for _ in range(8)))
    assert len({env.base_url for env in started}) == 8
    pids = [env.info["pid"] for env in started]
    await provider.close()
    assert all(gone(pid) for pid in pids)
    assert provider.started() == [] and list(local_records()) == []


def test_auto_env_starts_an_installed_environment_and_sync_close_stops_it() -> None:
    client = AutoEnv.from_env("echo")
    pid = started_env(client).info["pid"]
    with client.sync() as env:
        env.reset()
        assert env.call_tool("echo_message", message="auto") == "auto"
    assert gone(pid)


TRAINER = """
import asyncio, json, sys
from openenv.core.generic_client import GenericEnvClient

async def main():
    client = await GenericEnvClient.from_env("tests.apps.probe:app")
    reset = await client.reset()
    step = await client.step({"code": "result = subprocess.Popen(['sleep', '300'], "
                                      "start_new_session=True).pid"})
    print(json.dumps({"server": int(reset.observation["output"]),
                      "escaped": int(step.observation["output"])}), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


@pytest.mark.parametrize("kill_fork_server_too", [False, True])
def test_a_trainer_killed_with_sigkill_leaves_nothing_after_gc(
    tmp_path: Path, kill_fork_server_too: bool
) -> None:
    env = {**os.environ, **PYCACHE_ENV, "PYTHONPATH": str(REPO)}
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert trainer.stdout is not None
        pids = json.loads(trainer.stdout.readline())
        zygotes = children_of(trainer.pid)
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
        if kill_fork_server_too:
            for pid in zygotes:
                os.kill(pid, signal.SIGKILL)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
    # The fork server sees its trainer's pipe close and stops its environments; if it was
    # killed too, its children get their parent-death signal. Either way the server goes.
    assert gone(pids["server"])
    (record,) = local_records()
    assert record.owner.is_alive() is False
    orphans = LocalProcessProvider.collect_orphans()
    assert [o.id for o in orphans] == [record.id]
    assert list(local_records()) == []
    if cgroups.mode() is not None:
        # A process that left the group is caught by the cgroup.
        assert gone(pids["escaped"])
    else:  # pragma: no cover - machines without cgroups
        os.kill(pids["escaped"], signal.SIGKILL)


ENDINGS = {
    "returns": "pass",
    "raises": "raise RuntimeError('trainer bug')",
    "sigterm": "os.kill(os.getpid(), signal.SIGTERM); await asyncio.sleep(60)",
    "sigint": "os.kill(os.getpid(), signal.SIGINT); await asyncio.sleep(60)",
}

ENDING_TRAINER = """
import asyncio, json, os, signal, sys, time
from openenv.core.generic_client import GenericEnvClient

async def main():
    client = await GenericEnvClient.from_env("tests.apps.probe:app")
    reset = await client.reset()
    print(json.dumps({{"server": int(reset.observation["output"])}}), flush=True)
    {ending}

asyncio.run(main())
"""


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_trainer_that_exits_raises_or_is_signalled_stops_its_environments(
    ending: str,
) -> None:
    env = {**os.environ, **PYCACHE_ENV, "PYTHONPATH": str(REPO)}
    trainer = subprocess.run(
        [sys.executable, "-c", ENDING_TRAINER.format(ending=ENDINGS[ending])],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    pids = json.loads(trainer.stdout.splitlines()[0])
    assert gone(pids["server"])
    # Stopped by the trainer itself on the way out: no orphan is left for gc.
    assert list(local_records()) == [], trainer.stderr
