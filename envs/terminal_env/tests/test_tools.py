"""The MCP flavour: `bash` and `submit` tools over the wire, the same tasks and verdicts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.errors import InvalidRequestError, ToolCallError
from openenv.testing import check_env, running_server
from terminal_env import TerminalToolEnv
from terminal_env.server.tools_environment import TerminalToolEnvironment


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("terminal_env.server.mcp_app:app") as url:
        yield url


def test_passes_the_environment_checker() -> None:
    report = check_env(TerminalToolEnvironment)
    assert report.ok and not report.warnings, str(report)


async def test_bash_and_submit_tools_over_the_wire(server: str) -> None:
    async with TerminalToolEnv(base_url=server) as client:
        assert {tool.name for tool in await client.list_tools()} == {"bash", "submit"}
        first = await client.reset(task_id="create-greeting")
        assert "hello.txt" in first.observation.instruction
        ran = await client.call_tool("bash", command="cd /tmp && echo 'Hello, world!'")
        assert ran == {
            "output": "Hello, world!\n",
            "exit_code": 0,
            "status": "ok",
            "cwd": "/tmp",
            "steps_left": 9,
            "done": False,
        }
        with pytest.raises(ToolCallError, match="empty command"):
            await client.call_tool("bash", command=" ")
        write = "cd && echo 'Hello, world!' > hello.txt"
        step = await client.step(CallToolAction(tool_name="bash", arguments={"command": write}))
        assert step.reward == 0.0 and not step.done
        done = await client.step(CallToolAction(tool_name="submit", arguments={}))
        assert done.done and done.reward == 1.0
        assert done.observation.result["data"]["checks"]["hello.txt exists"] is True
        assert (await client.state()).score == 1.0
        with pytest.raises(InvalidRequestError, match="episode is over"):
            await client.call_tool("bash", command="ls")
