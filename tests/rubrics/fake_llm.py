"""A scriptable stand-in for a paid LLM API, served on a loopback port.

The real LLM services (OpenAI, Anthropic, hosted vLLM...) are paid and unreachable from the
test machines, so the client tests run the real httpx client code against this small HTTP
server instead. It speaks just enough of the OpenAI chat-completions and Anthropic Messages
wire formats, records every request, and answers from a queue of scripted replies (status,
body, headers, delay) so that rate limits, server errors, malformed bodies and slow answers
can be reproduced exactly.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Longest a `hang` reply waits for the server to stop.
HANG_LIMIT_S = 60.0
#: How long `meeting` parties wait for each other: only a client that never sends the other
#: requests runs into it.
MEET_TIMEOUT_S = 30.0


def meeting(parties: int) -> threading.Barrier:
    """A barrier for `Reply.meet`."""
    return threading.Barrier(parties, timeout=MEET_TIMEOUT_S)


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict/list -> JSON, str -> sent as is
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    #: Never answer while the test runs (the server lets it go when it stops): a hung request.
    hang: bool = False
    #: Answer only once every party of this barrier has a request in hand (it fails after its
    #: timeout otherwise): proof that the client sent them at once.
    meet: threading.Barrier | None = None


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


def openai_reply(content: str | None, tool_calls: list[dict[str, Any]] | None = None) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return Reply(
        body={
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 0,
            "model": "stand-in",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    )


def anthropic_reply(blocks: list[dict[str, Any]]) -> Reply:
    return Reply(
        body={
            "id": "msg_test",
            "type": "message",
            "role": "assistant",
            "model": "stand-in",
            "content": blocks,
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )


class FakeLLMServer:
    """Serve scripted replies; `respond` is used when the queue is empty."""

    def __init__(self, respond: Callable[[Request], Reply] | None = None) -> None:
        self.requests: list[Request] = []
        self.replies: deque[Reply] = deque()
        self.respond = respond or (lambda request: openai_reply("Score: 1/1"))
        self._lock = threading.Lock()
        self.stopped = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                request = Request(
                    "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                with server._lock:
                    server.requests.append(request)
                    reply = server.replies.popleft() if server.replies else None
                if reply is None:
                    reply = server.respond(request)
                if reply.meet is not None:
                    reply.meet.wait()
                if reply.hang:
                    server.stopped.wait(HANG_LIMIT_S)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                payload = reply.body
                data = (
                    payload.encode()
                    if isinstance(payload, str)
                    else json.dumps(payload if payload is not None else {}).encode()
                )
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout tests)
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopped.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
