"""The uv provider, for real: `uv run --isolated` serving envs/echo_env, an `openenv init`
folder (with and without a source for `openenv`) and a git clone of one."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from openenv.core.generic_client import GenericEnvClient
from openenv.core.utils import run_coroutine_sync as run
from openenv.providers import (
    EnvironmentStartError,
    EnvSpec,
    ProviderError,
    ProviderUnavailableError,
    ResourceLimits,
    SpecError,
    StartedEnv,
)
from openenv.providers.ownership import Owner, process_alive
from openenv.providers.records import session_members
from openenv.providers.uv import UVProvider, needs_openenv_source, split_git_target
from tests.providers.leaks import (
    ECHO_STEP,
    ENDINGS,
    REPO,
    TAG_VARIABLE,
    assert_nothing_leaks,
    end_trainer,
    leftovers,
    run_gc,
    start_trainer,
    tagged_processes,
)

ECHO = str(REPO / "envs" / "echo_env")

pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not installed")


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's records in its own folder, so tests never see each other's."""
    folder = tmp_path / "state"
    monkeypatch.setenv("OPENENV_STATE_DIR", str(folder))
    return folder


@pytest.fixture(scope="module")
def init_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder made by `openenv init`, outside this checkout's uv workspace."""
    parent = tmp_path_factory.mktemp("init")
    subprocess.run(
        [sys.executable, "-m", "openenv.cli", "init", "guess_env", "-o", str(parent)],
        check=True,
        capture_output=True,
    )
    return parent / "guess_env"


@pytest.fixture
def sourceless_folder(init_folder: Path, tmp_path: Path) -> Path:
    """The same folder with no [tool.uv.sources]: uv alone would take the index's `openenv`."""
    folder = tmp_path / "guess_env"
    shutil.copytree(init_folder, folder)
    pyproject = folder / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text[: text.index("[tool.uv.sources]")])
    return folder


def tree(pid: int) -> list[int]:
    """Live processes of the session `pid` leads (the server and everything it started)."""
    return session_members(pid)


async def episode(url: str) -> str:
    async with GenericEnvClient(base_url=url) as client:
        await client.reset()
        result = await client.step(ECHO_STEP)
        return str(result.observation)


# -- the async provider interface -----------------------------------------------------------


def test_echo_folder_runs_an_episode_and_stops_cleanly() -> None:
    provider = UVProvider()
    env = run(provider.start(ECHO))
    try:
        assert env.base_url.startswith("http://127.0.0.1:")
        assert env.info["app"] == "echo_env.server.app:app"
        assert env.info["openenv_source"] is None  # the workspace provides openenv
        assert "hi" in run(episode(env.base_url))
        [resource] = UVProvider.resources()
        assert (resource.id, resource.running, resource.owner_alive) == (env.id, True, True)
        assert resource.target == ECHO
        pid = env.info["pid"]
        server = [p for p in tree(pid) if p != pid]
        assert server, "the server runs in the session uv leads"
    finally:
        run(provider.stop(env))
    assert UVProvider.resources() == []
    assert tree(pid) == [] and not any(process_alive(p, None) for p in server)
    assert not Path(env.info["log"]).parent.exists()
    assert run(provider.is_running(env)) is False


def test_the_server_listens_on_loopback_only() -> None:
    with UVProvider() as provider:
        env = run(provider.start(ECHO))
        port = int(env.base_url.rsplit(":", 1)[1])
        listening = Path("/proc/net/tcp").read_text().splitlines()[1:]
        local = [line.split()[1] for line in listening if line.split()[3] == "0A"]
        assert f"0100007F:{port:04X}" in local
        assert f"00000000:{port:04X}" not in local


@pytest.mark.slow
def test_an_init_folder_runs_with_its_own_source_for_openenv(init_folder: Path) -> None:
    assert not needs_openenv_source(init_folder)
    with UVProvider() as provider:
        env = run(provider.start(str(init_folder)))
        assert env.info["openenv_source"] is None
        assert env.info["app"] == "server.app:app"  # OpenEnv's flat layout, run from the folder
        assert httpx.get(env.base_url + "/health").status_code == 200


@pytest.mark.slow
def test_a_folder_without_a_source_gets_this_openenv(sourceless_folder: Path) -> None:
    assert needs_openenv_source(sourceless_folder)
    with UVProvider() as provider:
        env = run(provider.start(str(sourceless_folder)))
        assert env.info["openenv_source"] == str(REPO)
        assert httpx.post(env.base_url + "/reset", json={}).status_code == 200


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_git_url_is_cloned_shallow_and_the_clone_removed(
    init_folder: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(init_folder, repo / "envs" / "guess_env")
    text = (repo / "envs/guess_env/pyproject.toml").read_text()
    (repo / "envs/guess_env/pyproject.toml").write_text(text[: text.index("[tool.uv.sources]")])
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "env"], check=True)
    subprocess.run([*git, "tag", "v1"], check=True)
    target = f"git+file://{repo}@v1#subdirectory=envs/guess_env"
    with UVProvider() as provider:
        env = run(provider.start(target))
        folder = Path(env.info["folder"])
        assert folder.name == "guess_env" and folder.is_relative_to(Path(env.info["log"]).parent)
        depth = subprocess.run(
            ["git", "-C", str(folder), "rev-list", "--count", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert depth.stdout.strip() == "1"
        [resource] = UVProvider.resources()
        assert resource.target == target  # the URL as given, never made into a path
    assert not folder.exists()


def test_git_targets_split_like_pip() -> None:
    assert split_git_target("git+https://huggingface.co/spaces/org/env") == (
        "https://huggingface.co/spaces/org/env",
        None,
        None,
    )
    assert split_git_target("git+ssh://git@example.org/org/env.git@v2#subdirectory=a/b") == (
        "ssh://git@example.org/org/env.git",
        "v2",
        "a/b",
    )


def test_a_server_that_fails_leaves_nothing_behind(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    (folder / "server").mkdir(parents=True)
    (folder / "server" / "app.py").write_text("raise RuntimeError('broken on purpose')\n")
    provider = UVProvider(openenv_source=str(REPO))
    with pytest.raises(EnvironmentStartError, match="broken on purpose"):
        run(provider.start(EnvSpec(target=str(folder), ready_timeout_s=120)))
    assert UVProvider.resources() == []
    assert provider.started() == []
    assert not list(Path(os.environ["OPENENV_STATE_DIR"]).glob("resources/*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("after_s", [0.01, 1.5])
def test_a_cancelled_start_leaves_nothing_behind(after_s: float) -> None:
    """Cancelled while uv is being launched (in a thread) or while waiting for /health."""
    tag = uuid.uuid4().hex

    async def main() -> None:
        provider = UVProvider(env_vars={TAG_VARIABLE: tag})
        task = asyncio.ensure_future(provider.start(ECHO))
        await asyncio.sleep(after_s)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert UVProvider.resources() == []
    assert tagged_processes(tag) == []


def test_not_a_folder_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="not a folder or a git"):
        run(UVProvider().start("echo"))
    assert UVProvider.resources() == []


def test_network_none_is_refused_not_pretended() -> None:
    with pytest.raises(SpecError, match="sandbox"):
        run(UVProvider().start(ECHO, network="none"))


def test_missing_uv_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ProviderUnavailableError, match="pip install uv"):
        UVProvider.check_available()
    assert UVProvider.available() is False


# -- limits ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_limits_hold_the_whole_tree_in_a_cgroup_or_rlimits() -> None:
    limits = ResourceLimits(memory_mb=512, pids=256)
    with UVProvider() as provider:
        env = run(provider.start(ECHO, limits=limits))
        pid = env.info["pid"]
        folders = env.info["cgroup"]
        if folders is None:  # no writable cgroup here: the server process has rlimits
            server = [p for p in tree(pid) if p != pid]
            text = Path(f"/proc/{server[-1]}/limits").read_text()
            assert str(512 * 1024 * 1024) in text
        else:
            members = set()
            for folder in folders:
                members |= {int(p) for p in Path(folder, "cgroup.procs").read_text().split()}
            assert set(tree(pid)) <= members
            memory = [f for f in folders if "memory" in f or Path(f, "memory.max").exists()]
            limit_file = next(
                Path(f, n)
                for f in memory
                for n in ("memory.max", "memory.limit_in_bytes")
                if Path(f, n).exists()
            )
            assert int(limit_file.read_text()) == 512 * 1024 * 1024
    for folder in folders or ():
        assert not Path(folder).exists()


@pytest.mark.slow
def test_wall_time_stops_the_environment() -> None:
    with UVProvider() as provider:
        env = run(provider.start(ECHO, wait=False, limits=ResourceLimits(wall_time_s=2)))
        pid = env.info["pid"]
        deadline = time.monotonic() + 60
        while tree(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert tree(pid) == []
        assert run(provider.is_running(env)) is False
        assert "wall time over" in run(provider.log_tail(env))


#: A process whose main thread exits on its own (the raw `exit` syscall, not `exit_group`)
#: while another thread still runs: /proc shows it as a zombie that waitpid cannot reap yet,
#: which is how a multi-threaded uv looks for a moment after the wall-time kill.
_ZOMBIE_LEADER = """
import ctypes, sys, threading, time
threading.Thread(target=time.sleep, args=(60,)).start()
ctypes.CDLL(None).syscall(int(sys.argv[1]), 0)
"""
_SYS_EXIT = {"x86_64": 60, "aarch64": 93}


@pytest.mark.skipif(platform.machine() not in _SYS_EXIT, reason="exit syscall number unknown")
def test_a_zombie_leader_waitpid_cannot_reap_yet_is_not_running() -> None:
    number = str(_SYS_EXIT[platform.machine()])
    proc = subprocess.Popen([sys.executable, "-c", _ZOMBIE_LEADER, number])
    try:
        deadline = time.monotonic() + 30
        while process_alive(proc.pid, None) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not process_alive(proc.pid, None)
        assert proc.poll() is None  # what `_alive` used to go by alone
        provider = UVProvider()
        env = StartedEnv(
            id="uv-zombie",
            provider="uv",
            spec=EnvSpec(target=ECHO),
            base_url="",
            owner=Owner.current(),
        )
        provider._procs[env.id] = proc
        assert run(provider.is_running(env)) is False
    finally:
        proc.kill()
        proc.wait()


# -- OpenEnv's RuntimeProvider API ----------------------------------------------------------


def test_openenv_style_start_wait_stop() -> None:
    provider = UVProvider(project_path=ECHO)
    url = provider.start()
    assert isinstance(url, str) and url == provider.base_url
    provider.wait_for_ready()
    assert httpx.get(url + "/health").status_code == 200
    assert len(UVProvider.resources()) == 1
    assert provider._compat_env is not None
    pid = provider._compat_env.info["pid"]
    provider.stop()
    assert provider.base_url is None
    assert UVProvider.resources() == []
    assert tree(pid) == []


@pytest.mark.slow
def test_openenv_style_start_on_a_given_port_with_env_vars() -> None:
    from tests.support.server import free_port

    port = free_port()
    provider = UVProvider(project_path=ECHO, env_vars={"FROM_CTOR": "1"})
    try:
        url = provider.start(port=port, env_vars={"FROM_START": "2"})
        assert url == f"http://127.0.0.1:{port}"
        provider.wait_for_ready(timeout_s=120)
        assert provider._compat_env is not None
        server = [
            p
            for p in tree(provider._compat_env.info["pid"])
            if p != provider._compat_env.info["pid"]
        ]
        environ = Path(f"/proc/{server[-1]}/environ").read_bytes().split(b"\0")
        assert b"FROM_CTOR=1" in environ and b"FROM_START=2" in environ
        with pytest.raises(ProviderError, match="already runs"):
            provider.start()
    finally:
        provider.stop()


@pytest.mark.slow
def test_openenv_style_context_manager_and_env_vars() -> None:
    with UVProvider(project_path=ECHO, env_vars={"OPENENV_LOG_LEVEL": "warning"}) as provider:
        assert provider.base_url is not None
        assert httpx.get(provider.base_url + "/health").status_code == 200
    assert UVProvider.resources() == []


@pytest.mark.slow
def test_openenv_style_start_inside_a_running_loop_survives_the_helper_thread() -> None:
    """OpenEnv's from_env calls the synchronous start() from async code: the helper thread
    that runs it ends at once, and the environment must not die with it (PDEATHSIG)."""

    async def main() -> str:
        provider = UVProvider(project_path=ECHO)
        url = provider.start()
        provider.wait_for_ready()
        await asyncio.sleep(1.0)
        try:
            return await episode(url)
        finally:
            provider.stop()

    assert "hi" in asyncio.run(main())


# -- nothing leaks --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("ending", ENDINGS)
def test_nothing_leaks_after_one_gc(ending: str, state_dir: Path) -> None:
    assert_nothing_leaks("uv", ECHO, ending, state_dir=state_dir)


@pytest.mark.slow
def test_the_harness_sees_what_a_killed_trainer_left(state_dir: Path) -> None:
    """Without gc, the record and its folder of a SIGKILLed trainer are still there (the
    processes are not: uv and the server die with the trainer), and the harness says so."""
    trainer = start_trainer("uv", ECHO, "sigkill", state_dir=state_dir)
    end_trainer(trainer, "sigkill")
    left = leftovers(trainer, "uv")
    assert any(item.startswith("uv resource") for item in left)
    assert any(item.startswith("path ") for item in left)
    assert not any(item.startswith("process ") for item in left), left
    assert run_gc(state_dir).returncode == 0
    assert leftovers(trainer, "uv") == []


@pytest.mark.slow
def test_the_first_start_in_a_process_collects_orphans(state_dir: Path) -> None:
    from openenv.providers import base

    trainer = start_trainer("uv", ECHO, "sigkill", state_dir=state_dir)
    end_trainer(trainer, "sigkill")
    assert leftovers(trainer, "uv")  # its record and scratch folder
    base._swept.discard(UVProvider)
    with UVProvider() as provider:
        env = run(provider.start(ECHO))
        assert [r.id for r in UVProvider.resources()] == [env.id]
    assert leftovers(trainer, "uv") == []


@pytest.mark.slow
def test_several_at_once_get_their_own_ports() -> None:
    async def main() -> list[str]:
        async with UVProvider() as provider:
            envs = await asyncio.gather(*(provider.start(ECHO) for _ in range(3)))
            assert len({e.base_url for e in envs}) == 3
            assert len(UVProvider.resources()) == 3
            return [await episode(e.base_url) for e in envs]

    assert all("hi" in text for text in asyncio.run(main()))
    assert UVProvider.resources() == []


@pytest.mark.slow
def test_sigkill_of_uv_alone_does_not_orphan_the_server() -> None:
    with UVProvider() as provider:
        env = run(provider.start(ECHO))
        pid = env.info["pid"]
        server = [p for p in tree(pid) if p != pid]
        boot = json.loads((Path(env.info["log"]).parent / "boot.json").read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(process_alive(p, None) for p in server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(process_alive(p, None) for p in server)
        # uv, killed, could not delete its scratch environment: stopping does
        assert Path(boot["prefix"]).is_dir()
        run(provider.stop(env))
        assert not Path(boot["prefix"]).exists()


@pytest.mark.slow
def test_nothing_leaks_with_limits_and_a_sigkill(state_dir: Path) -> None:
    trainer = assert_nothing_leaks(
        "uv", ECHO, "sigkill", state_dir=state_dir, spec={"limits": {"memory_mb": 512, "pids": 64}}
    )
    assert trainer.record is not None and "cgroup" in trainer.record
