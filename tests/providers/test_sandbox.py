"""The sandbox provider, for real: bubblewrap, namespaces, cgroups, and what an environment
inside can and cannot do (probed from inside with `sandbox_probe_env`, whose step runs a shell
command)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from openenv.core.utils import run_coroutine_sync
from openenv.isolation.bubblewrap import bubblewrap_problem
from openenv.providers import EnvironmentStartError, EnvSpec, ProviderUnavailableError, StartedEnv
from openenv.providers import sandbox as sandbox_module
from openenv.providers.ownership import local_records, process_alive
from openenv.providers.sandbox import SandboxProvider

PROBE = str(Path(__file__).parent / "sandbox_probe_env")
PY = sys.executable

if not SandboxProvider.available():
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"the sandbox provider must run in CI: {bubblewrap_problem()}")
    pytest.skip(f"{bubblewrap_problem()}", allow_module_level=True)


@pytest.fixture(scope="module")
def provider() -> Iterator[SandboxProvider]:
    instance = SandboxProvider()
    yield instance
    run_coroutine_sync(instance.close())


@pytest.fixture(scope="module")
def confined(provider: SandboxProvider) -> StartedEnv:
    """One probe environment with tight limits and no network, shared by the checks below."""
    spec = EnvSpec(target=PROBE, limits={"memory_mb": 160, "pids": 48})  # type: ignore[arg-type]
    return run_coroutine_sync(provider.start(spec))


def run(env: StartedEnv, command: str, timeout_s: float = 20.0, **extra: Any) -> dict[str, Any]:
    """Run `command` inside the environment over the protocol (HTTP /step)."""
    transport = httpx.HTTPTransport(uds=env.unix_socket) if env.unix_socket else None
    with httpx.Client(transport=transport, timeout=timeout_s + 30, trust_env=False) as http:
        response = http.post(
            env.base_url + "/step",
            json={"action": {"command": command, "timeout_s": timeout_s, **extra}},
        )
    response.raise_for_status()
    observation: dict[str, Any] = response.json()["observation"]
    return observation


def host_ip() -> str | None:
    """An address of this machine that is not loopback, if it has one."""
    with contextlib.suppress(OSError):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # no packet is sent for UDP connect
            address: str = probe.getsockname()[0]
            if not address.startswith("127."):
                return address
    return None


@contextlib.contextmanager
def listener(host: str) -> Iterator[int]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind((host, 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def connect_command(host: str, port: int) -> str:
    code = (
        f"import socket; socket.create_connection(({host!r}, {port}), timeout=3); "
        "print('CONNECTED')"
    )
    return f"{PY} -c {shlex.quote(code)}"


# -- an episode -----------------------------------------------------------------------------


def test_echo_episode_over_a_unix_socket(provider: SandboxProvider) -> None:
    from echo_env import EchoEnv
    from openenv.core.env_server import CallToolAction

    started = run_coroutine_sync(provider.start("echo"))
    try:
        assert started.unix_socket and Path(started.unix_socket).exists()
        with EchoEnv(**started.client_kwargs()).sync() as env:
            env.reset()
            result = env.step(CallToolAction(tool_name="echo_message", arguments={"message": "hi"}))
            assert "hi" in json.dumps(result.observation.model_dump())
    finally:
        run_coroutine_sync(provider.stop(started))
    assert not process_alive(started.info["pid"], started.info["pid_start"])
    assert not Path(started.unix_socket).exists()


# -- what an environment cannot do -------------------------------------------------------------


def test_host_secrets_are_not_readable(confined: StartedEnv, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    assert "top secret" not in run(confined, f"cat {secret}")["output"]
    if Path("/etc/shadow").exists():
        assert run(confined, "cat /etc/shadow")["exit_code"] != 0
    # The trainer's working folder is not bound (only the environment's folder and packages).
    trainer_file = Path.cwd() / "pyproject.toml"
    if trainer_file.exists() and not str(trainer_file).startswith(PROBE):
        assert run(confined, f"cat {trainer_file}")["exit_code"] != 0
    home = Path.home()
    listing = run(confined, f"ls -A {home}")
    if listing["exit_code"] == 0 and os.listdir(home):
        # Only what the sandbox binds from the home folder (the interpreter, say) is there.
        assert set(listing["output"].split()) < set(os.listdir(home))


def test_environment_code_at_import_cannot_unlock_mounts(confined: StartedEnv) -> None:
    """The probe's module tries, when the fork server imports it, to remount its read-only
    folder writable and to unmount it: the fork server's mounts are locked."""
    transport = httpx.HTTPTransport(uds=confined.unix_socket)
    with httpx.Client(transport=transport, timeout=30, trust_env=False) as http:
        response = http.post(confined.base_url + "/reset", json={})
    probe = response.json()["observation"]["metadata"]["import_probe"]
    assert set(probe) == {"remount_rw", "umount"}
    assert "succeeded" not in probe.values(), probe


def test_the_filesystem_is_read_only_except_tmp_and_workspace(confined: StartedEnv) -> None:
    for path in ("/usr/x", "/etc/x", "/x", f"{os.getcwd()}/x", f"{sys.prefix}/x"):
        result = run(confined, f"touch {path}")
        assert result["exit_code"] != 0, path
        assert not Path(path).exists()
    assert run(confined, "echo a > /tmp/a && echo b > /workspace/b && cat /tmp/a /workspace/b")[
        "output"
    ].split() == ["a", "b"]


def test_tmp_is_private_to_each_environment(
    provider: SandboxProvider, confined: StartedEnv
) -> None:
    run(confined, "echo mine > /tmp/private-marker")
    other = run_coroutine_sync(provider.start(PROBE))
    try:
        assert run(other, "cat /tmp/private-marker")["exit_code"] != 0
        assert not Path("/tmp/private-marker").exists()
    finally:
        run_coroutine_sync(provider.stop(other))


def test_no_network_by_default(confined: StartedEnv) -> None:
    targets = ["127.0.0.1"] + [ip for ip in [host_ip()] if ip]
    for host in targets:
        with listener(host) as port:
            result = run(confined, connect_command(host, port))
            assert "CONNECTED" not in result["output"], host
            assert result["exit_code"] != 0
    interfaces = run(confined, "ls /sys/class/net 2>/dev/null; cat /proc/net/dev")["output"]
    assert "eth0" not in interfaces and "lo" in interfaces


def test_egress_reaches_the_host(provider: SandboxProvider) -> None:
    egress = run_coroutine_sync(provider.start(PROBE, network="egress"))
    try:
        assert egress.unix_socket is None and egress.base_url.startswith("http://127.0.0.1:")
        with listener("127.0.0.1") as port:
            assert "CONNECTED" in run(egress, connect_command("127.0.0.1", port))["output"]
    finally:
        run_coroutine_sync(provider.stop(egress))


def test_processes_of_others_are_invisible(provider: SandboxProvider, confined: StartedEnv) -> None:
    listing = run(confined, "ls /proc")["output"].split()
    pids = sorted(int(p) for p in listing if p.isdigit())
    # init, the server, the shell and ls: nothing of the trainer or of other sandboxes.
    assert pids[:2] == [1, 2] and len(pids) <= 4, pids
    if os.getpid() not in pids:
        assert run(confined, f"kill -0 {os.getpid()}")["exit_code"] != 0


def test_no_capabilities_and_not_root(confined: StartedEnv) -> None:
    status = run(confined, "grep -E '^Cap(Bnd|Eff|Prm|Amb)' /proc/self/status")["output"]
    values = dict(line.split(":") for line in status.strip().splitlines())
    assert {k: int(v, 16) for k, v in values.items()} == {
        "CapPrm": 0,
        "CapEff": 0,
        "CapBnd": 0,
        "CapAmb": 0,
    }
    assert "NoNewPrivs:\t1" in run(confined, "grep NoNewPrivs /proc/self/status")["output"]
    if os.geteuid() == 0:
        assert run(confined, "id -u")["output"].strip() == str(sandbox_module.SANDBOX_UID)


def test_a_fork_bomb_is_contained(confined: StartedEnv) -> None:
    bomb = "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"
    result = run(confined, f"{PY} -c {shlex.quote(bomb)}", timeout_s=3)
    assert result["exit_code"] == -9, result  # ran until the step's timeout killed it
    hits = cgroup_counter(confined, "pids", "pids.events", "max")
    assert hits is None or hits > 0  # the process ceiling was reached
    # The environment survived and the host still forks.
    assert run(confined, "echo alive")["output"].strip() == "alive"
    assert subprocess.run(["true"]).returncode == 0


def cgroup_counter(env: StartedEnv, controller: str, name: str, key: str | None) -> int | None:
    """A counter of the environment's cgroup (v1 layout), None where there is none."""
    for group in env.info["record"].cgroup or ():
        path = Path(group, name)
        if f"/{controller}/" in group and path.exists():
            text = path.read_text()
            if key is None:
                return int(text.split()[0])
            for line in text.splitlines():
                if line.startswith(key + " "):
                    return int(line.split()[1])
    return None


def test_a_memory_hog_is_stopped(confined: StartedEnv) -> None:
    hog = "b = bytearray(600 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])\nprint('SURVIVED')"
    result = run(confined, f"{PY} -c {shlex.quote(hog)}")
    assert "SURVIVED" not in result["output"] and result["exit_code"] != 0, result
    assert "MemoryError" in result["output"] or result["exit_code"] in (-9, 137), result
    peak = cgroup_counter(confined, "memory", "memory.max_usage_in_bytes", None)
    assert peak is None or peak >= 150 * 1024 * 1024  # it was stopped at the ceiling
    assert run(confined, "echo alive")["output"].strip() == "alive"


def test_every_process_dies_with_the_environment(provider: SandboxProvider) -> None:
    env = run_coroutine_sync(provider.start(PROBE))
    marker = "4242.25"
    run(env, f"sleep {marker}", detach=True)
    deadline = time.monotonic() + 5
    leftovers: list[int] = []
    while time.monotonic() < deadline and not leftovers:
        leftovers = processes_with(f"sleep {marker}")
        time.sleep(0.05)
    assert leftovers, "the background process did not start"
    run_coroutine_sync(provider.stop(env))
    assert processes_with(f"sleep {marker}") == []
    for group in env.info["record"].cgroup or ():
        assert not Path(group).exists()


def processes_with(cmdline: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                text = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                if text == cmdline:
                    found.append(int(entry.name))
    return found


def test_wall_time_stops_the_environment(provider: SandboxProvider) -> None:
    env = run_coroutine_sync(provider.start(PROBE, limits={"wall_time_s": 1.0}))
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and run_coroutine_sync(provider._alive(env)):
            time.sleep(0.1)
        assert not run_coroutine_sync(provider._alive(env))
    finally:
        run_coroutine_sync(provider.stop(env))


# -- cleanup after a killed trainer --------------------------------------------------------------

TRAINER = textwrap.dedent(
    """
    import asyncio, json, sys
    from openenv.providers.sandbox import SandboxProvider

    async def main():
        provider = SandboxProvider()
        env = await provider.start(sys.argv[1])
        print(json.dumps({"pid": env.info["pid"], "id": env.id}), flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def test_a_sigkilled_trainer_leaves_nothing_after_collect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENENV_STATE_DIR", str(tmp_path / "state"))
    trainer = subprocess.Popen(
        [PY, "-c", TRAINER, PROBE], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        assert trainer.stdout is not None
        started = json.loads(trainer.stdout.readline())
        records = list(local_records())
        assert {r.id for r in records} >= {started["id"]}
        pids = [r.pid for r in records]
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            trainer.kill()
    SandboxProvider.collect_orphans()
    assert list(local_records()) == []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(process_alive(p, None) for p in pids):
        time.sleep(0.05)
    assert not any(process_alive(p, None) for p in pids)
    assert any(r.id.startswith("sandbox-forkserver-") for r in records)
    for record in records:
        for group in record.cgroup or ():
            assert not Path(group).exists()
        for path in record.cleanup_paths or ():
            assert not Path(path).exists()


# -- availability --------------------------------------------------------------------------------


def test_missing_bubblewrap_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    bubblewrap_problem.cache_clear()
    try:
        with pytest.raises(ProviderUnavailableError) as info:
            SandboxProvider.check_available()
        assert "apt-get install bubblewrap" in str(info.value)
        assert "\n" not in str(info.value)
    finally:
        monkeypatch.undo()
        bubblewrap_problem.cache_clear()
    SandboxProvider.check_available()


def test_concurrent_starts(provider: SandboxProvider) -> None:
    async def many() -> list[StartedEnv]:
        return await asyncio.gather(*(provider.start(PROBE) for _ in range(4)))

    envs = run_coroutine_sync(many())
    try:
        assert len({env.unix_socket for env in envs}) == 4
        assert [run(env, "echo ok")["output"].strip() for env in envs] == ["ok"] * 4
    finally:
        for env in envs:
            run_coroutine_sync(provider.stop(env))


def test_environment_code_holds_no_pipe_to_the_trainer(
    provider: SandboxProvider, confined: StartedEnv
) -> None:
    """The fork server answers the trainer on a pipe; a forked environment must not keep it
    (it could forge the fork server's replies)."""
    servers = list(sandbox_module._servers.values())
    assert servers
    pipes = set()
    for server in servers:
        for stream in (server.process.stdin, server.process.stdout):
            assert stream is not None
            pipes.add(os.readlink(f"/proc/self/fd/{stream.fileno()}"))
    members = group_members(confined.info["record"].pid)
    assert len(members) >= 3  # the group leader, the namespace's init, the server
    for pid in members:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                assert os.readlink(f"/proc/{pid}/fd/{fd}") not in pipes, (pid, fd)


def group_members(pgid: int) -> set[int]:
    """The processes of a process group, read from the host's /proc."""
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(entry.name)) == pgid:
                    members.add(int(entry.name))
    return members


def test_the_environment_is_in_its_cgroups(confined: StartedEnv) -> None:
    record = confined.info["record"]
    if not record.cgroup:
        pytest.skip("no writable cgroup hierarchy here: limits are per-process rlimits")
    run(confined, "sleep 31.4159", detach=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not processes_with("sleep 31.4159"):
        time.sleep(0.05)
    tree = group_members(record.pid) | set(processes_with("sleep 31.4159"))
    for group in record.cgroup:
        members = {int(p) for p in Path(group, "cgroup.procs").read_text().split()}
        assert tree <= members, (group, tree - members)


def test_a_failed_start_leaves_nothing_behind(provider: SandboxProvider, tmp_path: Path) -> None:
    """An environment under /tmp (bound again under the private /tmp) whose import fails."""
    folder = tmp_path / "broken_env"
    (folder / "broken_pkg").mkdir(parents=True)
    (folder / "openenv.yaml").write_text(
        "spec_version: 1\nname: broken_env\ntype: space\nruntime: fastapi\n"
        "app: broken_pkg.app:app\nport: 8000\n"
    )
    (folder / "pyproject.toml").write_text('[project]\nname = "broken-env"\nversion = "0.1.0"\n')
    (folder / "broken_pkg" / "__init__.py").write_text("")
    (folder / "broken_pkg" / "app.py").write_text("raise ImportError('broken on purpose')\n")
    before = {r.id for r in local_records()}
    cgroups_before = (
        set(os.listdir("/sys/fs/cgroup/pids/openenv"))
        if Path("/sys/fs/cgroup/pids/openenv").is_dir()
        else set()
    )
    with pytest.raises(EnvironmentStartError) as info:
        run_coroutine_sync(provider.start(str(folder)))
    assert "broken on purpose" in str(info.value)
    new = [r for r in local_records() if r.id not in before and not r.id.startswith("sandbox-fork")]
    assert new == []
    assert provider.started() == [] or all(e.spec.target != str(folder) for e in provider.started())
    if cgroups_before:
        leftover = set(os.listdir("/sys/fs/cgroup/pids/openenv")) - cgroups_before
        assert not [name for name in leftover if "broken" in name]
    for shared in sandbox_module._shared.values():
        assert not [p for p in shared.iterdir() if "broken" in p.name]
