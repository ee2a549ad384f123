"""The API key and the WebSocket Origin check, against a real server over real sockets."""

from __future__ import annotations

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from openenv.core.errors import ServerUnreachableError
from openenv.core.generic_client import GenericEnvClient
from tests.support.server import RunningServer, serve

KEY = "s3cret-key"
GUARDED = {"OPENENV_API_KEY": KEY, "OPENENV_ALLOWED_ORIGINS": "https://trusted.example"}


@pytest.fixture(scope="module")
def guarded() -> RunningServer:
    # Read when the app is built, so the server may run in this process.
    with serve("tests.apps.counter:app", env=GUARDED, in_process=True) as server:
        yield server


@pytest.fixture(scope="module")
def open_server() -> RunningServer:
    with serve("tests.apps.counter:app", env={"OPENENV_DOCS": "0"}, in_process=True) as server:
        yield server


def test_every_route_but_health_needs_the_key(guarded: RunningServer) -> None:
    with httpx.Client(base_url=guarded.url, trust_env=False) as http:
        assert http.get("/health").status_code == 200
        for method, path in (
            ("GET", "/metadata"),
            ("GET", "/schema"),
            ("POST", "/reset"),
            ("GET", "/state"),
            ("POST", "/mcp"),
            ("GET", "/docs"),
        ):
            reply = http.request(method, path)
            assert reply.status_code == 401, (path, reply.text)
            assert reply.json()["detail"]["code"] == "UNAUTHORIZED"
        wrong = http.post("/reset", json={}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        right = http.post("/reset", json={}, headers={"Authorization": f"Bearer {KEY}"})
        assert right.status_code == 200


async def test_websocket_handshake_needs_the_key_and_the_client_sends_it(
    guarded: RunningServer,
) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(guarded.ws_url, proxy=None):
            pass
    assert refused.value.response.status_code == 403
    with pytest.raises(ServerUnreachableError):
        await GenericEnvClient(base_url=guarded.url).reset()
    async with GenericEnvClient(base_url=guarded.url, api_key=KEY) as client:
        result = await client.step({"amount": 2})
        assert result.observation["history_length"] == 1


async def test_browser_origins_are_refused_unless_allowed(guarded: RunningServer) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    with pytest.raises(InvalidStatus):
        async with connect(
            guarded.ws_url, origin="https://evil.example", additional_headers=auth, proxy=None
        ):
            pass
    async with connect(
        guarded.ws_url, origin="https://trusted.example", additional_headers=auth, proxy=None
    ) as ws:
        await ws.send('{"type": "reset"}')
        assert '"observation"' in await ws.recv()


async def test_without_configuration_programs_connect_and_pages_do_not(
    open_server: RunningServer,
) -> None:
    async with connect(open_server.ws_url, proxy=None) as ws:  # a program: no Origin
        await ws.send('{"type": "reset"}')
        assert '"observation"' in await ws.recv()
    for path in ("/ws", "/mcp"):
        with pytest.raises(InvalidStatus):
            async with connect(
                open_server.ws_url.replace("/ws", path), origin="http://localhost:3000", proxy=None
            ):
                pass


def test_api_pages_can_be_turned_off(open_server: RunningServer) -> None:
    with httpx.Client(base_url=open_server.url, trust_env=False) as http:
        assert http.get("/docs").status_code == 404  # OPENENV_DOCS=0
        assert http.get("/openapi.json").status_code == 200  # OpenEnv tools read it
