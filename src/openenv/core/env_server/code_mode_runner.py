"""The interpreter side of MCP code mode; runs INSIDE the sandbox, so it uses the standard
library only (the server passes this file's source to `python -I -c`).

It is compiled under the file name `RUNNER_FILENAME` so that tracebacks can leave its frames
out. stdin carries one JSON object: the code, the tools (name, description, parameters, required)
and the path of the Unix socket the server listens on. Each tool becomes a function that sends
`{"op": "call", ...}` as one line of JSON and waits for the server's answer; at the end the
runner sends `{"op": "finish", ...}` with the code's `result` and its exception, if any. The
code's own stdout and stderr are the process's (the server reads them from the pipes).
"""

from __future__ import annotations

import builtins
import json
import keyword
import os
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

RUNNER_FILENAME = "<code-mode-runner>"
_MISSING = object()


class ToolCallError(Exception):
    """A tool call the server refused or that failed: `error_type` is `tool_not_found`,
    `invalid_args`, `execution_error`, `timeout` or `call_limit`."""

    def __init__(self, tool_name: str, error_type: str, message: str) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        self.error_type = error_type
        self.message = message


class _Channel:
    """One line of JSON each way per request, on the server's socket."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        self._reader = self._sock.makefile("rb")
        self.max_bytes = max_bytes
        # Code that calls tools from several threads must not interleave requests and replies.
        self._lock = threading.Lock()

    def encode(self, message: dict[str, Any]) -> bytes:
        """The message as one line; ValueError when the server would refuse its size."""
        data = json.dumps(message).encode()
        if len(data) >= self.max_bytes:
            raise ValueError(f"the message is larger than the limit of {self.max_bytes} bytes")
        return data + b"\n"

    def send(self, message: dict[str, Any]) -> None:
        self._sock.sendall(self.encode(message))

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.send(message)
            line = self._reader.readline()
        if not line:
            raise ConnectionError("the server closed the tool channel")
        reply: dict[str, Any] = json.loads(line)
        return reply


def _encode(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _tool_function(
    name: str, spec: dict[str, Any], call: Callable[[str, dict[str, Any]], Any]
) -> Callable[..., Any]:
    """A function with the tool's name and parameters: a wrong call fails as Python does
    (`f() missing 1 required positional argument: 'x'`) before reaching the server."""
    params = list(spec.get("parameters") or [])
    required = set(spec.get("required") or [])
    ordered = [p for p in params if p in required] + [p for p in params if p not in required]
    plain = name.isidentifier() and not keyword.iskeyword(name)
    if plain and all(
        p.isidentifier() and not keyword.iskeyword(p) and not p.startswith("__openenv")
        for p in ordered
    ):
        signature = ", ".join(p if p in required else f"{p}=__openenv_missing" for p in ordered)
        values = ", ".join(f"{p!r}: {p}" for p in ordered)
        source = (
            f"def {name}({signature}):\n"
            f"    arguments = {{{values}}}\n"
            f"    return __openenv_call({name!r}, {{k: v for k, v in arguments.items()"
            f" if v is not __openenv_missing}})\n"
        )
        scope: dict[str, Any] = {"__openenv_call": call, "__openenv_missing": _MISSING}
        exec(compile(source, RUNNER_FILENAME, "exec"), scope)
        function: Callable[..., Any] = scope[name]
    else:

        def function(**arguments: Any) -> Any:
            return call(name, arguments)

        function.__name__ = name if plain else "tool"
    function.__doc__ = spec.get("description") or None
    qualname = spec.get("qualname")
    if plain and isinstance(qualname, str) and qualname:
        function.__qualname__ = qualname
    return function


def _user_traceback(exc: BaseException) -> str:
    """The traceback from the code's own frames (the runner's are noise to the agent)."""
    frames = traceback.extract_tb(exc.__traceback__)
    frames = traceback.StackSummary.from_list([f for f in frames if f.filename != RUNNER_FILENAME])
    lines = ["Traceback (most recent call last):\n", *frames.format()] if frames else []
    return "".join(lines + traceback.format_exception_only(type(exc), exc))


def main() -> None:
    spec = json.loads(sys.stdin.read())
    sys.stdin = open(os.devnull)
    channel = _Channel(spec["socket"], int(spec["max_message_bytes"]))

    def call(tool_name: str, arguments: dict[str, Any]) -> Any:
        message = {"op": "call", "tool": tool_name, "arguments": arguments}
        try:
            channel.encode(message)
        except (TypeError, ValueError) as exc:
            raise ToolCallError(
                tool_name, "invalid_args", f"arguments not sendable: {exc}"
            ) from None
        reply = channel.request(message)
        if reply.get("ok"):
            return reply.get("value")
        raise ToolCallError(
            tool_name, str(reply.get("error_type")), str(reply.get("message", "tool failed"))
        )

    def call_tool(tool_name: str, **arguments: Any) -> Any:
        """Call any tool by name (also those whose names are not Python identifiers)."""
        return call(tool_name, arguments)

    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__builtins__": builtins,
        "ToolCallError": ToolCallError,
        "call_tool": call_tool,
    }
    for tool in spec["tools"]:
        namespace[tool["name"]] = _tool_function(tool["name"], tool, call)

    error: dict[str, str] | None = None
    try:
        code = compile(spec["code"], "<string>", "exec")
        exec(code, namespace)
    except SyntaxError as exc:
        error = {"type": "SyntaxError", "message": str(exc), "syntax": "1"}
        sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
    except SystemExit as exc:
        if exc.code not in (None, 0):
            error = {"type": "SystemExit", "message": str(exc.code)}
    except BaseException as exc:
        error = {"type": type(exc).__name__, "message": str(exc)}
        sys.stderr.write(_user_traceback(exc))
    sys.stdout.flush()
    sys.stderr.flush()
    finish = {"op": "finish", "result": _encode(namespace.get("result")), "error": error}
    try:
        channel.encode(finish)
    except ValueError as exc:
        finish = {
            "op": "finish",
            "result": None,
            "error": {"type": "ValueError", "message": f"result: {exc}"},
        }
    channel.send(finish)


if __name__ == "__main__":
    main()
