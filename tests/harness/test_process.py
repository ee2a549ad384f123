"""HarnessProcess: a real child process, on the host and inside the sandbox."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from openenv.core.harness import HarnessNotRunningError, HarnessStartupError
from openenv.core.harness.process import HarnessProcess
from openenv.sandbox import Sandbox, SandboxLimits

# Echoes lines; a child of its own that ignores SIGTERM shows the whole group is killed.
ECHO = """
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
print("ready", child.pid, flush=True)
print("oops", file=sys.stderr, flush=True)
for line in sys.stdin:
    print("echo:" + line.strip(), flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has exited
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_lines_in_and_out_and_everything_stopped(tmp_path):
    async def run() -> tuple[int, int]:
        process = HarnessProcess(
            [sys.executable, "-c", ECHO], cwd=str(tmp_path), terminate_grace_s=0.2
        )
        ready: list[str] = []
        await process.start(ready_check=lambda line: ready.append(line) or True)
        child = int(ready[0].split()[1])
        assert process.is_running()
        await process.write_line("hi")
        assert await process.read_line(timeout_s=30) == "echo:hi"
        assert await process.read_line(timeout_s=0.05) is None  # nothing more: a timeout
        await asyncio.sleep(0)
        await process.stop()
        await process.stop()  # idempotent
        assert not process.is_running()
        assert "oops" in process.drain_stderr()
        with pytest.raises(HarnessNotRunningError):
            await process.write_line("late")
        assert process.pid is not None
        return process.pid, child

    pid, child = asyncio.run(run())
    assert not _alive(pid) and not _alive(child)


def test_a_process_that_exits_before_it_is_ready_fails_to_start(tmp_path):
    process = HarnessProcess(
        [sys.executable, "-c", "import sys; print('no', file=sys.stderr); sys.exit(2)"],
        cwd=str(tmp_path),
    )
    with pytest.raises(HarnessStartupError, match="exited before it was ready: no"):
        asyncio.run(process.start(ready_check=lambda line: line == "ready"))


def test_a_missing_command_fails_to_start(tmp_path):
    process = HarnessProcess([str(tmp_path / "nothing-here")], cwd=str(tmp_path))
    with pytest.raises(HarnessStartupError):
        asyncio.run(process.start())


def test_the_process_can_run_inside_the_sandbox():
    box = Sandbox(limits=SandboxLimits(wall_time_s=60, network=False))
    try:

        async def run() -> tuple[str, str]:
            script = "import os, sys\nprint('ready', os.getcwd(), flush=True)\n" + (
                "for line in sys.stdin:\n    print('got:' + line.strip(), flush=True)\n"
            )
            box.write_file("agent.py", script)
            process = HarnessProcess(
                [box.python, "agent.py"], cwd=box.workspace, sandbox=box, terminate_grace_s=0.2
            )
            lines: list[str] = []
            await process.start(ready_check=lambda line: lines.append(line) or True)
            await process.write_line("x")
            reply = await process.read_line(timeout_s=30)
            await process.stop()
            assert not process.is_running()
            return lines[0], reply or ""

        ready, reply = asyncio.run(run())
        assert ready == f"ready {box.workspace}" and reply == "got:x"
    finally:
        box.close()
