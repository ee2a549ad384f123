"""A stand-in for Daytona's HTTP API, for the Daytona provider's tests.

Daytona is a paid outside service, so this is a TEST DOUBLE, not Daytona: a real HTTP server
(Starlette under uvicorn, on loopback) that the real `daytona` SDK talks to. It answers the
sandbox API the provider uses (create, get, list by labels, delete, preview URL) and the
toolbox's process sessions with the shapes the SDK's models require, checks the API key, and
answers errors as Daytona does (`{"statusCode", "message", "error"}`, 401/404/429). A sandbox is
"started" at once; the command executed in its session, `python -m <package>.server.app ...`,
runs that app in this process on a loopback port, behind a check of the preview token (as
Daytona's preview proxy does: 401 without it). `rate_limit(n)` answers the next n creations with
429 and a `Retry-After` header; `kill(id)` ends a sandbox as a crash would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.providers.standin_support import serve_standin, start_server, stop_server
from tests.support.server import load_app

ERRORS = {401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests", 400: "Bad Request"}
_SERVER = re.compile(r"python -m ([\w.]+)\.server\.app\b.*--port (\d+)")


def error(code: int, message: str, headers: Optional[dict[str, str]] = None) -> JSONResponse:
    return JSONResponse(
        {"statusCode": code, "message": message, "error": ERRORS.get(code, "Error")},
        status_code=code,
        headers=headers,
    )


@dataclass
class Box:
    """One sandbox: its API object and the server its session runs."""

    data: dict[str, Any]
    token: str
    ports: dict[int, int] = field(default_factory=dict)
    servers: list[tuple[Any, Any]] = field(default_factory=list)
    sessions: set[str] = field(default_factory=set)
    #: command id -> {"id", "command", "exitCode", "output"}
    commands: dict[str, dict[str, Any]] = field(default_factory=dict)


class DaytonaStandIn:
    def __init__(self, api_key: str = "standin-key") -> None:
        self.api_key = api_key
        self.boxes: dict[str, Box] = {}
        self.create_attempts = 0
        self.rate_limited = 0
        self._reject_next = 0
        self._retry_after: Optional[str] = None
        self.url = ""
        self.loop: Optional[asyncio.AbstractEventLoop] = None

    @property
    def api_url(self) -> str:
        return self.url + "/api"

    # -- test hooks ------------------------------------------------------------------------------

    def rate_limit(self, count: int, retry_after: Optional[str] = "0.01") -> None:
        """Answer the next `count` creations with 429 (a burst over the organisation's cap)."""
        self._reject_next = count
        self._retry_after = retry_after

    def names(self) -> list[str]:
        return sorted(box.data["name"] for box in self.boxes.values())

    def kill(self, sandbox_id: str) -> None:
        assert self.loop is not None
        asyncio.run_coroutine_threadsafe(self._end(sandbox_id, "error"), self.loop).result(30)

    # -- the API -----------------------------------------------------------------------------------

    def app(self) -> Starlette:
        box = "/api/sandbox/{sandbox_id}"
        toolbox = "/toolbox/{sandbox_id}/process/session"
        return Starlette(
            routes=[
                Route("/api/sandbox", self.sandboxes, methods=["GET", "POST"]),
                Route(box, self.sandbox, methods=["GET", "DELETE"]),
                Route(box + "/ports/{port:int}/preview-url", self.preview),
                Route(toolbox, self.create_session, methods=["POST"]),
                Route(toolbox + "/{session}/exec", self.execute, methods=["POST"]),
                Route(toolbox + "/{session}/command/{command_id}", self.command),
                Route(toolbox + "/{session}/command/{command_id}/logs", self.command_logs),
            ]
        )

    def _authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.api_key}"

    async def sandboxes(self, request: Request) -> Response:
        if not self._authorized(request):
            return error(401, "Invalid credentials")
        if request.method == "GET":
            wanted = json.loads(request.query_params.get("labels") or "{}")
            items = [
                _list_item(b.data)
                for b in self.boxes.values()
                if all(b.data["labels"].get(k) == v for k, v in wanted.items())
            ]
            return JSONResponse({"items": items, "nextCursor": None})
        self.create_attempts += 1
        if self._reject_next > 0:
            self._reject_next -= 1
            self.rate_limited += 1
            headers = {"Retry-After": self._retry_after} if self._retry_after else None
            return error(429, "ThrottlerException: Too Many Requests", headers)
        body = await request.json()
        if any(b.data["name"] == body.get("name") for b in self.boxes.values()):
            return error(409, f"Sandbox with name {body.get('name')} already exists")
        sandbox_id = str(uuid.uuid4())
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        data = {
            "id": sandbox_id,
            "organizationId": "standin-org",
            "name": body.get("name") or sandbox_id,
            "snapshot": body.get("snapshot"),
            "user": body.get("user") or "daytona",
            "env": body.get("env") or {},
            "labels": body.get("labels") or {},
            "public": bool(body.get("public")),
            "networkBlockAll": bool(body.get("networkBlockAll")),
            "kvm": False,
            "target": body.get("target") or "us",
            "cpu": body.get("cpu") or 1,
            "gpu": 0,
            "memory": body.get("memory") or 1,
            "disk": body.get("disk") or 3,
            "state": "started",
            "autoStopInterval": body.get("autoStopInterval"),
            "autoDeleteInterval": body.get("autoDeleteInterval"),
            "buildInfo": _build_info(body.get("buildInfo"), now),
            "createdAt": now,
            "updatedAt": now,
            "toolboxProxyUrl": self.url + "/toolbox",
            "ttl": body.get("ttlMinutes"),
        }
        self.boxes[sandbox_id] = Box(data, token=uuid.uuid4().hex)
        return JSONResponse(data)

    def _find(self, key: str) -> Optional[Box]:
        return self.boxes.get(key) or next(
            (b for b in self.boxes.values() if b.data["name"] == key), None
        )

    async def sandbox(self, request: Request) -> Response:
        if not self._authorized(request):
            return error(401, "Invalid credentials")
        box = self._find(request.path_params["sandbox_id"])
        if box is None:
            return error(404, f"Sandbox {request.path_params['sandbox_id']} not found")
        if request.method == "GET":
            return JSONResponse(box.data)
        await self._end(box.data["id"], "destroyed")
        self.boxes.pop(box.data["id"], None)
        return JSONResponse(box.data)

    async def preview(self, request: Request) -> Response:
        if not self._authorized(request):
            return error(401, "Invalid credentials")
        box = self._find(request.path_params["sandbox_id"])
        port = request.path_params["port"]
        if box is None:
            return error(404, "Sandbox not found")
        if port not in box.ports:  # nothing listens there (yet): the proxy answers 502
            with socket.socket() as unused:
                unused.bind(("127.0.0.1", 0))
                box.ports[port] = unused.getsockname()[1]
        return JSONResponse(
            {
                "sandboxId": box.data["id"],
                "url": f"http://127.0.0.1:{box.ports[port]}",
                "token": box.token,
            }
        )

    async def create_session(self, request: Request) -> Response:
        if not self._authorized(request):
            return error(401, "Invalid credentials")
        box = self._find(request.path_params["sandbox_id"])
        if box is None:
            return error(404, "Sandbox not found")
        box.sessions.add((await request.json())["sessionId"])
        return Response(status_code=201)

    async def execute(self, request: Request) -> Response:
        if not self._authorized(request):
            return error(401, "Invalid credentials")
        box = self._find(request.path_params["sandbox_id"])
        if box is None or request.path_params["session"] not in box.sessions:
            return error(404, "Session not found")
        command = (await request.json())["command"]
        record: dict[str, Any] = {"id": uuid.uuid4().hex, "command": command, "exitCode": None}
        record["output"] = ""
        box.commands[record["id"]] = record
        match = _SERVER.search(command)
        if match is None:
            record.update(exitCode=127, output=f"sh: 1: {command.split()[0]}: not found\n")
            return JSONResponse({"cmdId": record["id"]})
        try:
            app = await asyncio.to_thread(load_app, f"{match.group(1)}.server.app:app", {})
        except Exception as exc:  # what the interpreter in the sandbox would print, and exit 1
            record.update(exitCode=1, output=f"{type(exc).__name__}: {exc}\n")
            return JSONResponse({"cmdId": record["id"]})
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        box.ports[int(match.group(2))] = sock.getsockname()[1]
        box.servers.append(start_server(_PreviewProxy(app, box.token), sock))
        record["output"] = f"INFO: serving on port {match.group(2)}\n"
        return JSONResponse({"cmdId": record["id"]})

    def _command(self, request: Request) -> Optional[dict[str, Any]]:
        box = self._find(request.path_params["sandbox_id"])
        return box.commands.get(request.path_params["command_id"]) if box else None

    async def command(self, request: Request) -> Response:
        if not self._authorized(request):
            return error(401, "Invalid credentials")
        record = self._command(request)
        if record is None:
            return error(404, "Command not found")
        return JSONResponse({k: record[k] for k in ("id", "command", "exitCode")})

    async def command_logs(self, request: Request) -> Response:
        if not self._authorized(request):
            return error(401, "Invalid credentials")
        record = self._command(request)
        if record is None:
            return error(404, "Command not found")
        return JSONResponse({"output": record["output"], "stdout": record["output"], "stderr": ""})

    async def _end(self, sandbox_id: str, state: str) -> None:
        box = self.boxes.get(sandbox_id)
        if box is None:
            return
        for server, task in box.servers:
            await stop_server(server, task)
        box.servers.clear()
        box.data["state"] = state

    async def stop_all(self) -> None:
        for sandbox_id in list(self.boxes):
            await self._end(sandbox_id, "destroyed")


class _PreviewProxy:
    """Daytona's preview proxy in front of a private sandbox: no token, no entry."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope.get("headers") or ())
            if headers.get(b"x-daytona-preview-token") != self.token:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 4401})
                    return
                await JSONResponse({"error": "missing preview token"}, 401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _build_info(given: Optional[dict[str, Any]], now: str) -> Optional[dict[str, Any]]:
    """What Daytona reports of a sandbox built from an image (its Dockerfile, a snapshot ref)."""
    if not given:
        return None
    return {**given, "createdAt": now, "updatedAt": now, "snapshotRef": "standin-" + now}


def _list_item(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in ("env", "kvm", "buildInfo")}


@contextlib.contextmanager
def running_daytona() -> Iterator[DaytonaStandIn]:
    standin = DaytonaStandIn()
    with serve_standin(standin.app(), standin.stop_all) as (url, loop):
        standin.url, standin.loop = url, loop
        yield standin
