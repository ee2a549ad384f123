"""A real server whose steps run untrusted code in the sandbox, hit by hostile snippets in
parallel sessions while another session keeps stepping: every hostile step comes back as a typed
status, the steady session never fails, /health stays fine and no process outlives its step."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest

from openenv.core.generic_client import GenericEnvClient
from tests.support.server import serve

from .conftest import bubblewrap_problem, survivors

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOKEN = f"7{int.from_bytes(os.urandom(3), 'big')}"  # in every leftover's command line

HOSTILE = {
    "python fork bomb": ("import os\nwhile True: os.fork()", {"process_limit"}),
    "bash fork bomb": (
        "import subprocess, sys\nsys.exit(subprocess.call(['bash', '-c', ':(){ :|:& };:']))",
        {"process_limit", "ok"},  # it returns at once: killed before or after the limit
    ),
    "memory hog": ("a = []\nwhile True: a.append(bytearray(10**7))", {"memory_limit"}),
    "endless stdout": ("while True: print('x' * 999)", {"output_limit"}),
    "endless stderr": (
        "import sys\nwhile True: sys.stderr.write('y' * 999)",
        {"output_limit"},
    ),
    "cpu spin": ("while True: pass", {"cpu_limit"}),
    "big file": ("open('big', 'wb').write(bytes(10_000_000))", {"file_limit"}),
    "leftovers": (
        "import subprocess\n"
        f"subprocess.Popen(['sleep', '1000.{TOKEN}'])\n"
        f"subprocess.Popen(['setsid', 'sleep', '1001.{TOKEN}'])\n"
        f"subprocess.Popen(['nohup', 'sleep', '1002.{TOKEN}'])\n"
        "print('left them')",
        {"ok"},
    ),
    "host files": ("print(open('/etc/shadow').read()[:10])", {"error", "ok"}),
    "socket": (
        "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=5)",
        {"error"},
    ),
}


@pytest.mark.parametrize("backend", ["bubblewrap", "process"])
async def test_the_server_stays_healthy_under_hostile_code(backend: str) -> None:
    if backend == "bubblewrap" and (problem := bubblewrap_problem()):
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    with serve("tests.sandbox.sandbox_app:app", env={"OPENENV_SANDBOX": backend}) as server:
        assert server.process is not None
        stop = asyncio.Event()

        async def hostile(name: str) -> tuple[str, str, str]:
            code, _ = HOSTILE[name]
            async with GenericEnvClient(base_url=server.url, message_timeout_s=240) as env:
                reset = await env.reset()
                assert reset.observation["backend"] == backend
                result = await env.step({"code": code})
                again = await env.step({"code": "print('still usable')"})
                assert again.observation["stdout"] == "still usable\n", (name, again)
                return name, result.observation["status"], result.observation["stderr"]

        async def steady() -> int:
            steps = 0
            async with GenericEnvClient(base_url=server.url, message_timeout_s=240) as env:
                await env.reset()
                while not stop.is_set() or steps < 3:
                    result = await env.step({"code": f"print({steps} * 2)"})
                    assert result.observation["status"] == "ok", result
                    assert result.observation["stdout"] == f"{steps * 2}\n"
                    assert result.reward == 1.0
                    steps += 1
            return steps

        steady_task = asyncio.create_task(steady())
        outcomes = await asyncio.gather(*(hostile(name) for name in HOSTILE))
        stop.set()
        assert await steady_task >= 3
        for name, status, stderr in outcomes:
            assert status in HOSTILE[name][1], (name, status, stderr[-300:])

        async with httpx.AsyncClient() as http:
            health = await http.get(f"{server.url}/health", timeout=30)
        assert health.status_code == 200
        assert survivors(TOKEN) == []
        assert descendants(server.process.pid) == []


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` on the host (the server's sandboxed commands)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
