"""The "nothing leaks" harness, for any provider.

A trainer script runs in a subprocess: it starts an environment with the provider under test,
resets it, takes a step, reports what it started and blocks. The harness then ends it one of
the ways a trainer ends (SIGKILL, SIGTERM, SIGINT, a normal exit or an uncaught exception, none
of which stops the environment first), runs the real `openenv gc` in another subprocess, and
checks by listing that nothing of the trainer survives:

- `provider.resources()` lists nothing owned by the trainer's pid;
- no process carries the trainer's tag: every process the trainer started inherits the
  variable `OPENENV_LEAK_TAG`, so a search of `/proc/*/environ` finds any that escaped its
  process group or session;
- the folders and files its local record named (log, socket, workspace, clone) are gone.

    from tests.providers.leaks import assert_nothing_leaks
    assert_nothing_leaks("uv", "envs/echo_env", "sigkill", state_dir=tmp_path / "state")

Container providers add their own listing through `extra_check` (a callable that gets the
trainer's report and returns what it found left over).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

#: How a trainer ends. None of them stops its environment first.
ENDINGS = ("sigkill", "sigterm", "sigint", "exit", "raise")

ECHO_STEP = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hi"}}

TAG_VARIABLE = "OPENENV_LEAK_TAG"

REPO = Path(__file__).resolve().parents[2]

TRAINER = r"""
import asyncio, json, os, sys

cfg = json.loads(sys.argv[1])


async def main():
    from openenv.core.generic_client import GenericEnvClient
    from openenv.providers import get_provider

    provider = get_provider(cfg["provider"], **cfg["provider_kwargs"])
    env = await provider.start(cfg["target"], **cfg["spec"])
    client = GenericEnvClient(**env.client_kwargs())
    await client.reset()
    await client.step(cfg["action"])
    report = {
        "pid": os.getpid(),
        "id": env.id,
        "provider": env.provider,
        "base_url": env.base_url,
        "unix_socket": env.unix_socket,
        "info": env.info,
    }
    print("READY " + json.dumps(report, default=str), flush=True)
    if cfg["ending"] == "exit":
        return
    if cfg["ending"] == "raise":
        raise RuntimeError("the trainer failed mid-episode")
    await asyncio.sleep(3600)


asyncio.run(main())
"""


@dataclass
class Trainer:
    """A running trainer subprocess and what it reported."""

    process: subprocess.Popen[str]
    tag: str
    env: dict[str, str]
    report: dict[str, Any] = field(default_factory=dict)
    #: The provider's local record of the environment (None for container providers).
    record: Optional[dict[str, Any]] = None


def trainer_environ(state_dir: Path, tag: Optional[str] = None) -> dict[str, str]:
    env = dict(os.environ)
    env["OPENENV_STATE_DIR"] = str(state_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    if tag is not None:
        env[TAG_VARIABLE] = tag
    return env


def start_trainer(
    provider: str,
    target: str,
    ending: str,
    *,
    state_dir: Path,
    provider_kwargs: Optional[dict[str, Any]] = None,
    spec: Optional[dict[str, Any]] = None,
    action: Optional[dict[str, Any]] = None,
    timeout_s: float = 180.0,
) -> Trainer:
    """Run the trainer until it has taken its step; fail with its output if it never does."""
    if ending not in ENDINGS:
        raise ValueError(f"ending must be one of {ENDINGS}")
    tag = uuid.uuid4().hex
    env = trainer_environ(state_dir, tag)
    config = {
        "provider": provider,
        "target": target,
        "ending": ending,
        "provider_kwargs": provider_kwargs or {},
        "spec": spec or {},
        "action": action or ECHO_STEP,
    }
    process = subprocess.Popen(
        [sys.executable, "-c", TRAINER, json.dumps(config)],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    trainer = Trainer(process, tag, env)
    lines: queue.Queue[Optional[str]] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
            if line.startswith("READY "):
                return  # the rest is read by communicate() when the trainer ends
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    output = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        output.append(line)
        if line.startswith("READY "):
            trainer.report = json.loads(line[len("READY ") :])
            break
    if not trainer.report:
        kill_tagged(tag)
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()
        raise AssertionError("the trainer never reported its environment:\n" + "".join(output))
    record_path = state_dir / "resources" / f"{trainer.report['id']}.json"
    with contextlib.suppress(OSError, ValueError):
        trainer.record = json.loads(record_path.read_text())
    return trainer


def end_trainer(trainer: Trainer, ending: str, timeout_s: float = 60.0) -> int:
    """End the trainer as `ending` says and return its exit status."""
    signals = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigint": signal.SIGINT}
    if ending in signals:
        trainer.process.send_signal(signals[ending])
    try:
        trainer.process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        trainer.process.kill()
        trainer.process.communicate()
        raise AssertionError(f"the trainer did not end after {ending}") from None
    return trainer.process.returncode


def run_gc(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `openenv gc`, in its own process, as a person would run it."""
    return subprocess.run(
        [sys.executable, "-m", "openenv.cli", "gc", *args],
        cwd=REPO,
        env=trainer_environ(state_dir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    return stat.rpartition(")")[2].split()[0]


def tagged_processes(tag: str) -> list[int]:
    """Live (not zombie) processes whose environment carries `tag`."""
    needle = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _state(int(entry)) not in ("Z", "X"):
            found.append(int(entry))
    return found


def kill_tagged(tag: str) -> None:
    """Clean up after a failed check, so one leak does not spoil the next tests."""
    for pid in tagged_processes(tag):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def leftovers(
    trainer: Trainer,
    provider: str,
    extra_check: Optional[Callable[[Trainer], list[str]]] = None,
    settle_s: float = 5.0,
) -> list[str]:
    """What of the trainer still exists, by listing; empty when nothing does.

    Processes are given `settle_s` to finish dying (a SIGKILLed process is gone once the kernel
    reaps it, not the instant the signal is sent); nothing is waited for otherwise.
    """
    from openenv.providers import provider_class

    found: list[str] = []
    deadline = time.monotonic() + settle_s
    while True:
        processes = tagged_processes(trainer.tag)
        if not processes or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for pid in processes:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            command = "?"
        found.append(f"process {pid}: {command[:200]}")
    owner_pid = trainer.report["pid"]
    old = os.environ.get("OPENENV_STATE_DIR")
    os.environ["OPENENV_STATE_DIR"] = trainer.env["OPENENV_STATE_DIR"]
    try:
        resources = provider_class(provider).resources()
    finally:
        if old is None:
            del os.environ["OPENENV_STATE_DIR"]
        else:
            os.environ["OPENENV_STATE_DIR"] = old
    for resource in resources:
        if resource.owner is not None and resource.owner.pid == owner_pid:
            found.append(f"{provider} resource {resource.id} ({resource.target})")
    for path in (trainer.record or {}).get("cleanup_paths") or ():
        if os.path.lexists(path):
            found.append(f"path {path}")
    for folder in (trainer.record or {}).get("cgroup") or ():
        if os.path.isdir(folder):
            found.append(f"cgroup {folder}")
    if extra_check is not None:
        found.extend(extra_check(trainer))
    return found


def assert_nothing_leaks(
    provider: str,
    target: str,
    ending: str,
    *,
    state_dir: Path,
    provider_kwargs: Optional[dict[str, Any]] = None,
    spec: Optional[dict[str, Any]] = None,
    action: Optional[dict[str, Any]] = None,
    extra_check: Optional[Callable[[Trainer], list[str]]] = None,
) -> Trainer:
    """Start, step, end the trainer as `ending`, run `openenv gc` once: nothing may be left."""
    trainer = start_trainer(
        provider,
        target,
        ending,
        state_dir=state_dir,
        provider_kwargs=provider_kwargs,
        spec=spec,
        action=action,
    )
    try:
        assert tagged_processes(trainer.tag), "the harness cannot see the environment's processes"
        status = end_trainer(trainer, ending)
        if ending == "exit":
            assert status == 0, f"the trainer failed: exit status {status}"
        else:
            assert status != 0, f"the trainer was to end by {ending} but exited with 0"
        gc = run_gc(state_dir)
        assert gc.returncode == 0, f"openenv gc failed:\n{gc.stdout}\n{gc.stderr}"
        left = leftovers(trainer, provider, extra_check)
        assert not left, f"after {ending} and one `openenv gc`, left over: {left}\n{gc.stdout}"
    finally:
        kill_tagged(trainer.tag)
        if trainer.process.poll() is None:
            trainer.process.kill()
            trainer.process.communicate()
    return trainer
