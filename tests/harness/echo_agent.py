"""A tiny real harness for the tests: a child process that reads one JSON line per turn on
stdin and prints JSON-line events, ending each turn with `turn_complete`.

It remembers every message of the episode (its reply lists them all), calls the injected tools
over the real MCP bridge (`call:<tool> <json arguments>`), and can misbehave on request:
`crash` exits mid-turn, `hang` never answers, `pause:<file>` says so and then waits for that
file to exist (to show events arrive while a turn runs), `done` ends the episode. `BRIDGE_URL` and
`TOOLS` (a JSON list of names) come from the environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any


def emit(kind: str, **data: Any) -> None:
    print(json.dumps({"type": kind, "data": data}), flush=True)


async def call_tool(name: str, arguments: dict[str, Any]) -> tuple[Any, str | None]:
    from fastmcp import Client

    async with Client(os.environ["BRIDGE_URL"]) as client:
        result = await client.call_tool(name, arguments, raise_on_error=False)
    text = " ".join(getattr(block, "text", "") for block in result.content)
    return (None, text) if result.is_error else (result.data, None)


def main() -> None:
    history: list[str] = []
    emit("ready", tools=json.loads(os.environ.get("TOOLS", "[]")), pid=os.getpid())
    for line in sys.stdin:
        message = json.loads(line)["message"]
        history.append(message)
        if message == "crash":
            sys.exit(3)
        if message == "hang":
            time.sleep(3600)
        if message.startswith("pause:"):
            emit("text_output", text="paused")
            while not os.path.exists(message[len("pause:") :]):
                time.sleep(0.01)
        if message.startswith("call:"):
            name, _, raw = message[len("call:") :].partition(" ")
            arguments = json.loads(raw or "{}")
            emit("tool_call", tool_name=name, arguments=arguments)
            try:
                value, error = asyncio.run(call_tool(name, arguments))
            except Exception as exc:  # an MCP protocol error: reported like a tool error
                value, error = None, f"{type(exc).__name__}: {exc}"
            emit("tool_result", tool_name=name, result=value, error=error)
        emit("text_output", text=f"turn {len(history)}")
        emit("turn_complete", response=" | ".join(history), done=message == "done")


if __name__ == "__main__":
    main()
