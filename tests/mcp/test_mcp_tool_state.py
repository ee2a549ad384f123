"""Tools written for OpenEnv: fastmcp session state (`ctx.get_state` / `ctx.set_state`), reserved
names, and the in-process result type.

The counter server (tests/compat/counter_server.py, OpenEnv-style code) has one tool, `bump`,
which adds one to a count kept in fastmcp's session state and returns it as text. In one session
it answers "1" then "2"; a fresh session starts again at "1". One environment instance is one
session here, whichever transport reaches it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
from mcp.client.streamable_http import streamable_http_client
from websockets.asyncio.client import connect

from mcp import ClientSession
from openenv.core.env_server import (
    CallToolAction,
    CodeModeLimits,
    ExecuteCodeAction,
    ExecuteCodeObservation,
    MCPEnvironment,
)
from openenv.core.env_server.serialization import serialize_observation
from openenv.core.errors import InvalidActionError
from openenv.core.mcp_client import MCPToolClient
from openenv.sandbox import SandboxError, choose_backend
from tests.compat.counter_server import CounterEnvironment, counter_tools
from tests.support.server import RunningServer, serve

COUNTER_APP = "tests.compat.counter_server:app"
BUMP = CallToolAction(tool_name="bump", arguments={})


@pytest.fixture(scope="module")
def counter_server() -> Iterator[RunningServer]:
    with serve(COUNTER_APP) as server:
        yield server


def _rpc(method: str, params: dict[str, Any], rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


# -- in process ---------------------------------------------------------------------------


def test_in_process_steps_share_the_environments_state():
    env = CounterEnvironment()
    first, second = env.step(BUMP), env.step(BUMP)
    assert (first.error, second.error) == (None, None)
    assert [first.result.data, second.result.data] == ["1", "2"]
    assert CounterEnvironment().step(BUMP).result.data == "1"


async def test_in_process_async_steps_share_the_environments_state():
    env = CounterEnvironment()
    assert [(await env.step_async(BUMP)).result.data for _ in range(3)] == ["1", "2", "3"]


def test_in_process_result_is_fastmcps_call_tool_result():
    from fastmcp.client.client import CallToolResult

    observation = CounterEnvironment().step(BUMP)
    assert isinstance(observation.result, CallToolResult)
    assert observation.result.data == "1"
    assert observation.result.is_error is False
    assert observation.result.content[0].text == "1"
    # The serialized form is the wire's, unchanged: a JSON object of the result's fields.
    assert serialize_observation(observation)["observation"]["result"] == {
        "content": [{"type": "text", "text": "1", "annotations": None, "meta": None}],
        "structured_content": {"result": "1"},
        "meta": {"fastmcp": {"wrap_result": True}},
        "data": "1",
        "is_error": False,
    }


# -- reserved names -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["reset", "step", "state", "close"])
def test_reserved_tool_names_are_refused_when_the_environment_is_built(name):
    mcp = counter_tools()
    mcp.tool(lambda: "x", name=name)
    with pytest.raises(ValueError, match=rf"\['{name}'\].*reset, state, step"):
        MCPEnvironment.__init__(CounterEnvironment.__new__(CounterEnvironment), mcp)


def test_reserved_tool_added_after_building_is_refused_at_first_use():
    env = CounterEnvironment()
    env.mcp_server.tool(lambda: "x", name="close")
    listed = env.step(CallToolAction(tool_name="bump"))
    assert listed.error is not None and "close" in listed.error.message


def test_reserved_names_refused_by_the_tool_decorator():
    env = CounterEnvironment()

    def state() -> str:
        return "x"

    with pytest.raises(ValueError, match="reserved"):
        env.tool()(state)


# -- over the wire ------------------------------------------------------------------------------


async def _mcp_tool_client(url: str, calls: int) -> list[Any]:
    async with MCPToolClient(base_url=url) as env:
        return [await env.call_tool("bump") for _ in range(calls)]


async def _ws_steps(url: str, calls: int) -> list[Any]:
    env = MCPToolClient(base_url=url)
    env.use_production_mode = False
    async with env:
        await env.reset()
        return [(await env.step(BUMP)).observation.result["data"] for _ in range(calls)]


async def _ws_mcp_messages(url: str, calls: int) -> list[Any]:
    async with connect(url.replace("http://", "ws://") + "/ws") as ws:
        counts = []
        for rid in range(calls):
            await ws.send(
                json.dumps({"type": "mcp", "data": _rpc("tools/call", {"name": "bump"}, rid)})
            )
            counts.append(json.loads(await ws.recv())["data"]["result"]["data"])
        return counts


async def _ws_mcp_endpoint(url: str, calls: int) -> list[Any]:
    async with connect(url.replace("http://", "ws://") + "/mcp") as ws:
        counts = []
        for rid in range(calls):
            await ws.send(json.dumps(_rpc("tools/call", {"name": "bump"}, rid)))
            counts.append(json.loads(await ws.recv())["result"]["data"])
        return counts


async def _http_sessions(url: str, calls: int) -> list[Any]:
    async with httpx.AsyncClient(timeout=30) as http:
        created = await http.post(f"{url}/mcp", json=_rpc("openenv/session/create", {}))
        sid = created.json()["result"]["session_id"]
        counts = []
        for rid in range(calls):
            params = {"name": "bump", "arguments": {}, "session_id": sid}
            counts.append(
                (await http.post(f"{url}/mcp", json=_rpc("tools/call", params, rid))).json()[
                    "result"
                ]["data"]
            )
        await http.post(f"{url}/mcp", json=_rpc("openenv/session/close", {"session_id": sid}))
        return counts


async def _stock_mcp_client(url: str, calls: int) -> list[Any]:
    async with streamable_http_client(f"{url}/mcp") as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return [
                (await session.call_tool("bump", {})).structured_content["result"]
                for _ in range(calls)
            ]


TRANSPORTS: dict[str, Callable[[str, int], Awaitable[list[Any]]]] = {
    "mcp_tool_client_http": _mcp_tool_client,
    "mcp_tool_client_ws_steps": _ws_steps,
    "ws_mcp_messages": _ws_mcp_messages,
    "ws_mcp_endpoint": _ws_mcp_endpoint,
    "http_jsonrpc_sessions": _http_sessions,
    "stock_mcp_client": _stock_mcp_client,
}


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_tool_state_is_kept_per_session(counter_server, transport):
    call = TRANSPORTS[transport]
    assert await call(counter_server.url, 2) == ["1", "2"]
    assert await call(counter_server.url, 1) == ["1"]  # another session starts fresh


async def test_http_step_reply_carries_the_result_as_before(counter_server):
    async with httpx.AsyncClient(timeout=30) as http:
        reply = (
            await http.post(f"{counter_server.url}/step", json={"action": BUMP.model_dump()})
        ).json()
    assert reply["observation"]["result"] == {
        "content": [{"type": "text", "text": "1", "annotations": None, "meta": None}],
        "structured_content": {"result": "1"},
        "meta": {"fastmcp": {"wrap_result": True}},
        "data": "1",
        "is_error": False,
    }


# -- code mode (OpenEnv's CodeAct helpers) ----------------------------------------------------


def _adder_env() -> MCPEnvironment:
    mcp = counter_tools()

    @mcp.tool
    def add(a: int, b: int) -> int:
        return a + b

    env = CounterEnvironment.__new__(CounterEnvironment)
    MCPEnvironment.__init__(env, mcp)
    return env


def test_code_mode_runs_python_with_the_tools_as_functions():
    env = _adder_env()
    try:
        assert env.supports_code_mode
        assert sorted(env.get_callables()) == ["add", "bump"]
        assert env.execute_code("result = add(2, 3) * 2").metadata == {"result": 10}
        failed = env.execute_code("result = add(1)")
        assert "missing 1 required positional argument" in failed.metadata["error"]
        assert env.execute_code("result = (").metadata["error"].startswith("Syntax error: ")
    finally:
        env.close()


def test_execute_code_runs_sandboxed_unless_asked_to_run_in_process():
    env = _adder_env()
    try:
        code = "import sys\nresult = 'openenv.core' in sys.modules"
        assert env.execute_code(code).metadata == {"result": False}  # a fresh interpreter
        assert env.execute_code(code, in_process=True).metadata == {"result": True}
        sandboxed = env.step(ExecuteCodeAction(code="result = add(1, 1)"))
        assert isinstance(sandboxed, ExecuteCodeObservation)
        assert sandboxed.result == 2
        assert sandboxed.metadata["backend"] == choose_backend()
    finally:
        env.close()


def test_code_mode_works_on_the_process_fallback(monkeypatch):
    """What a container without user namespaces gets (the container is the boundary there)."""
    monkeypatch.setenv("OPENENV_SANDBOX", "process")
    env = _adder_env()
    try:
        obs = env.step(ExecuteCodeAction(code="result = [add(1, 2), bump(), bump()]"))
        assert isinstance(obs, ExecuteCodeObservation)
        assert (obs.result, obs.metadata["backend"]) == ([3, "1", "2"], "process")
    finally:
        env.close()


def test_a_sandbox_that_cannot_run_is_an_infrastructure_error(monkeypatch):
    """Never an observation a trainer could score as the agent's failure."""
    monkeypatch.setenv("OPENENV_SANDBOX", "no-such-backend")
    env = _adder_env()
    try:
        with pytest.raises(SandboxError, match="no sandbox to run the code in") as raised:
            env.step(ExecuteCodeAction(code="result = 1"))
        assert raised.value.data["category"] == "infrastructure"
    finally:
        env.close()


def test_execute_code_has_the_environments_time_limit():
    env = _adder_env()
    env.code_mode_limits = CodeModeLimits(wall_time_s=1)
    try:
        stopped = env.execute_code("while True:\n    pass\n")
        assert stopped.metadata["error"].startswith("TimeoutError: the code ran past its 1 s")
    finally:
        env.close()


def test_code_mode_can_be_turned_off():
    class NoCode(CounterEnvironment):
        code_mode_enabled = False

    env = NoCode()
    try:
        assert not env.supports_code_mode
        with pytest.raises(InvalidActionError, match="does not accept code mode"):
            env.step(ExecuteCodeAction(code="result = 1"))
        assert env.step(BUMP).result.data == "1"  # the session goes on
    finally:
        env.close()
