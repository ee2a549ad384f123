"""MCP code mode through a real server: the agent's Python runs in the sandbox, each tool is a
function there, and each call is a normal tool call of the session.

The echo server (envs/echo_env) and the counter server (tests/compat/counter_server.py, a tool
keeping a count in fastmcp's `ctx` state) are served on loopback and driven over real
WebSocket frames (and HTTP `/step`) by the MCP client. OpenEnv's in-process `execute_code()` is
tested in test_mcp_tool_state.py.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import httpx
import pytest

from echo_env import EchoEnv
from openenv.core.env_server import ExecuteCodeObservation, MCPEnvironment
from openenv.core.mcp_client import MCPToolClient
from tests.support.server import RunningServer, serve

COUNTER_APP = "tests.compat.counter_server:app"


@pytest.fixture(scope="module")
def counter_server() -> Iterator[RunningServer]:
    with serve(COUNTER_APP) as server:
        yield server


def _code(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


def test_one_step_calls_a_tool_three_times_and_combines_the_results(echo_server):
    with EchoEnv(base_url=echo_server.url).sync() as env:
        env.reset()
        obs = env.execute_code(
            _code(
                """
                words = [echo_message(message=w) for w in ("one", "two")]
                words.append(echo_message("three"))
                print("echoed", len(words))
                result = " ".join(words)
                """
            )
        )
        assert isinstance(obs, ExecuteCodeObservation)
        assert (obs.status, obs.error) == ("ok", None)
        assert obs.result == "one two three"
        assert obs.stdout == "echoed 3\n"
        assert [(c.tool_name, c.arguments, c.result) for c in obs.tool_calls] == [
            ("echo_message", {"message": "one"}, "one"),
            ("echo_message", {"message": "two"}, "two"),
            ("echo_message", {"message": "three"}, "three"),
        ]
        assert env.state().step_count == 1  # three tool calls, one step


def test_tools_are_functions_with_the_tools_parameters_and_descriptions(echo_server):
    with EchoEnv(base_url=echo_server.url).sync() as env:
        obs = env.execute_code(
            _code(
                """
                import inspect
                result = {
                    "signature": str(inspect.signature(echo_with_length)),
                    "doc": echo_with_length.__doc__,
                    "value": echo_with_length("abc"),
                }
                """
            )
        )
    assert obs.result == {
        "signature": "(message)",
        "doc": "Echo back the message together with its length.",
        "value": {"message": "abc", "length": 3},
    }


def test_a_tool_error_is_an_exception_in_the_code(echo_server):
    with EchoEnv(base_url=echo_server.url).sync() as env:
        caught = env.execute_code(
            _code(
                """
                result = []
                for call in (lambda: echo_message(message=["not", "text"]),
                             lambda: call_tool("no_such_tool")):
                    try:
                        call()
                    except ToolCallError as exc:
                        result.append(exc.error_type)
                """
            )
        )
        assert caught.status == "ok"
        assert caught.result == ["invalid_args", "tool_not_found"]
        assert [c.error.error_type.value for c in caught.tool_calls if c.error] == [
            "invalid_args",
            "tool_not_found",
        ]

        uncaught = env.execute_code("result = echo_message(message=42)\n")
        assert uncaught.status == "error"
        assert uncaught.error is not None and uncaught.error.startswith("ToolCallError: ")
        assert "Invalid arguments for 'echo_message'" in uncaught.error
        assert "Traceback" in uncaught.stderr and 'File "<string>", line 1' in uncaught.stderr

        # Refused in the sandbox, in Python's words for the tool's own function.
        wrong_call = env.execute_code("echo_message()\n")
        assert wrong_call.error is not None and wrong_call.error.startswith("TypeError: ")
        assert wrong_call.error.endswith(
            "echo_message() missing 1 required positional argument: 'message'"
        )
        assert wrong_call.tool_calls == []


def test_syntax_errors_exceptions_and_oversized_messages_are_reported(echo_server):
    with EchoEnv(base_url=echo_server.url).sync() as env:
        syntax = env.execute_code("result = (\n")
        assert syntax.status == "error"
        assert syntax.error is not None and syntax.error.startswith("SyntaxError: ")
        divide = env.execute_code("print('before')\nresult = 1 / 0\n")
        assert (divide.status, divide.error) == ("error", "ZeroDivisionError: division by zero")
        assert divide.stdout == "before\n"
        huge = MCPEnvironment.code_mode_limits.max_message_bytes + 1
        too_big = env.execute_code(f"result = 'x' * {huge}\n")
        assert (too_big.status, too_big.result) == ("error", None)
        assert too_big.error is not None and "larger than the limit" in too_big.error
        big_argument = env.execute_code(
            f"try:\n    echo_message('x' * {huge})\nexcept ToolCallError as exc:\n"
            "    result = exc.error_type\n"
        )
        assert (big_argument.result, big_argument.tool_calls) == ("invalid_args", [])


def test_an_endless_loop_times_out_and_the_server_keeps_serving(echo_server):
    with EchoEnv(base_url=echo_server.url).sync() as env:
        env.reset()
        obs = env.execute_code("echo_message('first')\nwhile True:\n    pass\n", timeout_s=1)
        assert obs.status == "timeout"
        assert obs.error is not None and obs.error.startswith("TimeoutError: ")
        assert [c.result for c in obs.tool_calls] == ["first"]
        assert httpx.get(f"{echo_server.url}/health", timeout=30).status_code == 200
        again = env.execute_code("result = echo_message('still here')\n")
        assert again.result == "still here"  # the same session is still usable
        assert env.call_tool("echo_message", message="and tools") == "and tools"


def test_tool_calls_per_execution_are_capped(echo_server):
    cap = MCPEnvironment.code_mode_limits.max_tool_calls
    with EchoEnv(base_url=echo_server.url).sync() as env:
        obs = env.execute_code(
            _code(
                f"""
                done = 0
                try:
                    for i in range({cap + 5}):
                        echo_message(str(i))
                        done += 1
                except ToolCallError as exc:
                    result = [done, exc.error_type]
                """
            )
        )
    assert obs.result == [cap, "call_limit"]
    assert len(obs.tool_calls) == cap
    assert obs.metadata["tool_calls_refused"] == 1


def test_the_code_reaches_only_the_tools(echo_server):
    """No reset/step over the tool channel, no server objects, no server port (bubblewrap)."""
    code = _code(
        f"""
        import gc, json, os, socket
        found = {{}}
        for name in ("reset", "step", "state", "execute_code"):
            try:
                call_tool(name)
                found[name] = "called"
            except ToolCallError as exc:
                found[name] = exc.error_type
        path = next(p for p in os.listdir(".") if p.endswith(".sock"))
        raw = socket.socket(socket.AF_UNIX)
        raw.connect(path)
        raw.sendall(json.dumps({{"op": "step", "action": {{}}}}).encode() + b"\\n")
        found["raw_step"] = json.loads(raw.makefile().readline())
        found["server_objects"] = [
            type(o).__name__ for o in gc.get_objects()
            if type(o).__name__ in ("EchoEnvironment", "SessionManager", "FastMCP")
        ]
        try:
            socket.create_connection(("127.0.0.1", {echo_server.port}), timeout=2).close()
            found["server_port"] = "reached"
        except OSError:
            found["server_port"] = "unreachable"
        result = found
        """
    )
    with EchoEnv(base_url=echo_server.url).sync() as env:
        obs = env.execute_code(code)
    assert obs.status == "ok", obs.stderr
    found = obs.result
    assert {k: found[k] for k in ("reset", "step", "state", "execute_code")} == dict.fromkeys(
        ("reset", "step", "state", "execute_code"), "tool_not_found"
    )
    assert found["raw_step"] == {
        "ok": False,
        "error_type": "bad_request",
        "message": "unknown operation",
    }
    assert found["server_objects"] == []
    if obs.metadata["backend"] == "bubblewrap":
        assert found["server_port"] == "unreachable"


def test_the_code_cannot_open_many_tool_connections(echo_server):
    """The runner's own connection and three more at most: each costs the server a descriptor."""
    code = _code(
        """
        import json, os, socket, threading
        path = next(p for p in os.listdir(".") if p.endswith(".sock"))
        answered = 0
        held = []
        for _ in range(8):
            raw = socket.socket(socket.AF_UNIX)
            held.append(raw)
            try:  # a refused connection may be closed before this end writes to it
                raw.connect(path)
                raw.sendall(b'{"op": "ping"}\\n')
                answered += bool(raw.makefile().readline())
            except OSError:
                pass
        # Tools called from several threads at once still get their own answers.
        values = {}
        def worker(i):
            values[i] = echo_message(str(i))
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        result = [answered, sorted(values.items())]
        """
    )
    with EchoEnv(base_url=echo_server.url).sync() as env:
        obs = env.execute_code(code)
    assert obs.status == "ok", obs.stderr
    assert obs.result == [3, [[0, "0"], [1, "1"], [2, "2"], [3, "3"]]]


def test_ctx_state_is_shared_by_code_mode_and_plain_tool_calls(counter_server):
    with MCPToolClient(base_url=counter_server.url).sync() as env:
        env.use_production_mode = False  # tool calls as steps, on the same /ws session
        env.reset()
        assert env.call_tool("bump") == "1"
        obs = env.execute_code("result = [bump(), bump()]\n")
        assert obs.result == ["2", "3"]
        assert env.call_tool("bump") == "4"


def test_sessions_are_isolated(counter_server):
    with (
        MCPToolClient(base_url=counter_server.url).sync() as first,
        MCPToolClient(base_url=counter_server.url).sync() as second,
    ):
        first.reset()
        second.reset()
        made = first.execute_code(
            "open('note.txt', 'w').write('first session')\nresult = [bump(), bump()]\n"
        )
        assert made.result == ["1", "2"]
        other = second.execute_code("import os\nresult = [bump(), os.path.exists('note.txt')]\n")
        assert other.result == ["1", False]
        kept = first.execute_code("result = [bump(), open('note.txt').read()]\n")
        assert kept.result == ["3", "first session"]  # the workspace lasts for the session


def test_http_step_runs_code_on_a_throwaway_environment(echo_server):
    reply = httpx.post(
        f"{echo_server.url}/step",
        json={"action": {"type": "execute_code", "code": "result = echo_message('over http')"}},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    observation = reply.json()["observation"]
    assert observation["status"] == "ok"
    assert observation["result"] == "over http"
    assert observation["tool_calls"] == [
        {
            "tool_name": "echo_message",
            "arguments": {"message": "over http"},
            "result": "over http",
            "error": None,
        }
    ]
