"""OpenEnv 0.10's sync client code (plain `with`, calls without `await` or `.sync()`) runs the same
with either package against either server.

sync_client_snippet.py is run four ways: the published client against our echo server and our
client against the published echo server (the point), plus each package against its own server
as the reference. All four must report the same observations.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import RunningServer

from .conftest import OUR_PYTHON

pytestmark = pytest.mark.compat

SNIPPET = Path(__file__).resolve().parent / "sync_client_snippet.py"
TIMEOUT_S = 90
EXPECTED = {
    "reset": ["StepResult", False, "ready"],
    "step": ["StepResult", False, True],
    "step_count": 1,
    "no_with": ["StepResult", None],
    "mixed": "RuntimeError",
    "in_running_loop": ["StepResult", "dict"],
    "mcp_list_tools_awaitable": True,
    "mcp_reset": "ready",
}


@pytest.fixture(scope="module")
def runs(
    compat_python: str, our_server: RunningServer, published_server: RunningServer
) -> dict[str, Any]:
    """{"<client> client -> <server> server": what the snippet saw}, run at once."""
    pythons = {"published": compat_python, "our": OUR_PYTHON}
    servers = {"our": our_server.url, "published": published_server.url}
    procs = {
        f"{client} client -> {server} server": subprocess.Popen(
            [python, str(SNIPPET), url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=SNIPPET.parent,  # not the repo root: the published run sees only its package
        )
        for client, python in pythons.items()
        for server, url in servers.items()
    }
    seen: dict[str, Any] = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        assert proc.returncode == 0, f"{name} failed:\n{err[-3000:]}"
        seen[name] = json.loads(out)
    return seen


@pytest.mark.parametrize(
    "run",
    [
        "published client -> our server",
        "our client -> published server",
        "published client -> published server",
        "our client -> our server",
    ],
)
def test_openenv_sync_snippet(runs: dict[str, Any], run: str) -> None:
    assert runs[run] == EXPECTED


def test_after_asyncio_run_an_openenv_server_session_is_not_silently_replaced(
    published_server: RunningServer,
) -> None:
    """Connected inside `asyncio.run()`, then used from sync code. An OpenEnv server cannot resume
    the session, and OpenEnv's client would carry on in a fresh one (the episode gone, its step
    count back to 0); ours says the session is lost, and `reset()` starts a new episode."""
    import asyncio

    from openenv.core import GenericEnvClient
    from openenv.core.errors import SessionLostError

    env = GenericEnvClient(base_url=published_server.url)

    async def episode() -> int:
        await env.connect()
        await env.reset()
        await env.step({"type": "call_tool", "tool_name": "echo_message", "arguments": {}})
        return int((await env.state())["step_count"])

    assert asyncio.run(episode()) == 1
    with pytest.raises(SessionLostError, match="reset"):
        env.state()
    assert env.reset().metadata["status"] == "ready"
    assert env.state()["step_count"] == 0
    env.close()
