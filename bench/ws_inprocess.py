"""CPU per step of an app's `/ws` path alone: no sockets, no uvicorn, no client processes.

Each session is a fake ASGI connection whose `send` queues the next step as soon as the reply
arrives, so the loop never waits and the figure is the app's own Python (handler, session
manager, thread hop, serialisation) per step. On a shared machine it moves far less than
`bench.py`'s server CPU, which also counts the transport and depends on how many messages each
wake-up of the loop finds: use it to compare two versions of the code, `bench.py` for the
figures against the floor.

    python bench/ws_inprocess.py plain_env:app --sessions 64 --steps 100000 --repeat 3
    PYTHONPATH=/tmp/old/src python bench/ws_inprocess.py plain_env:app   # an older src/ tree
    python bench/ws_inprocess.py echo_env.server.app:app --mcp          # MCP tool-call steps
    python bench/ws_inprocess.py atari_env.server.app:app --sessions 16 --steps 8000 \
        --reset '{"seed": 0, "frame_format": "bytes"}' --frame '{"action_id": 0}' --binary
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import resource
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
FRAME = json.dumps({"type": "step", "data": {"value": 1}})
#: bench.py's MCP step (`--mcp`).
MCP_FRAME = json.dumps(
    {
        "type": "step",
        "data": {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hi"}},
    }
)
#: uvicorn's scope extension (`connections.ABORT_EXTENSION`), with "no frame queued": over a
#: network the next frame arrives after the reply has gone.
_EXTENSIONS = {"openenv.transport.abort": {"frames_waiting": lambda: False}}


async def _session(
    app: Any,
    steps: int,
    answered: list[int],
    frame: str,
    reset: str | None,
    binary: bool,
    reset_done: asyncio.Barrier,
) -> None:
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    inbox.put_nowait({"type": "websocket.connect"})
    replies = 0
    hello = binary  # offering the subprotocols, the server sends the session's frame first
    resetting = reset is not None

    def check(message: dict[str, Any], what: str) -> None:
        if "text" not in message:
            return  # a binary frame: an observation with attachments
        reply = json.loads(message["text"])
        if reply.get("type") == "error":  # a wrong frame for this app would measure errors
            raise SystemExit(
                f"the app answered the {what} with an error: {reply.get('data')}; "
                "use --mcp for an MCP environment, --frame/--reset for others"
            )

    async def send(message: dict[str, Any]) -> None:
        nonlocal replies, hello, resetting
        if message["type"] == "websocket.accept":
            inbox.put_nowait({"type": "websocket.receive", "text": reset or frame})
        elif message["type"] == "websocket.send":
            if hello:
                hello = False
                return
            if resetting:
                check(message, "reset")
                resetting = False
                await reset_done.wait()  # the resets (a ROM load, say) are not measured
                inbox.put_nowait({"type": "websocket.receive", "text": frame})
                return
            if replies < 2:
                check(message, "step")
            replies += 1
            answered[0] += 1
            if replies >= steps:
                inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})
            else:
                inbox.put_nowait({"type": "websocket.receive", "text": frame})

    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "scheme": "ws",
        "path": "/ws",
        "raw_path": b"/ws",
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "subprotocols": ["openenv.v1.bin", "openenv.v1"] if binary else [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
        "state": {},
        "extensions": dict(_EXTENSIONS),
    }
    await app(scope, inbox.get, send)


def _switches() -> int:
    """Context switches of every thread of the process so far (exited threads included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


async def _run(
    app: Any, sessions: int, steps: int, frame: str, reset: str | None, binary: bool
) -> tuple[float, float]:
    answered = [0]
    reset_done = asyncio.Barrier(sessions + 1 if reset is not None else 1)
    running = asyncio.gather(
        *(
            _session(app, steps // sessions, answered, frame, reset, binary, reset_done)
            for _ in range(sessions)
        )
    )
    await reset_done.wait()
    switches = _switches()
    started = time.process_time()  # every thread of the process: the worker threads too
    await running
    per_step = (time.process_time() - started) / answered[0]
    return per_step, (_switches() - switches) / answered[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("app", help="MODULE:ATTR, e.g. plain_env:app or floor_app:app")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100_000, help="steps per run, all sessions")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mcp", action="store_true", help="send MCP tool-call steps (echo)")
    parser.add_argument("--frame", help='the step\'s action as JSON (default: {"value": 1})')
    parser.add_argument("--reset", help="reset first with these JSON options (not counted)")
    parser.add_argument(
        "--binary", action="store_true", help="offer openenv.v1.bin (binary attachments)"
    )
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    module, _, attr = args.app.partition(":")
    app = getattr(importlib.import_module(module), attr)
    try:  # what the app's lifespan does at start-up, which is not run here
        from openenv.core.env_server.runner import freeze_startup_objects

        freeze_startup_objects()
    except ImportError:
        pass
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    for _ in range(args.repeat):
        frame = MCP_FRAME if args.mcp else FRAME
        if args.frame:
            frame = json.dumps({"type": "step", "data": json.loads(args.frame)})
        reset = None
        if args.reset is not None:
            reset = json.dumps({"type": "reset", "data": json.loads(args.reset or "{}")})
        run_ = _run(app, args.sessions, args.steps, frame, reset, args.binary)
        per_step, switches = run(run_)
        print(
            f"{args.app}: {args.sessions} sessions, {per_step * 1e6:.1f} µs CPU per step, "
            f"{switches:.2f} context switches per step"
        )


if __name__ == "__main__":
    main()
