"""The /web playground's routes and its access rules, against real servers over real sockets
(the page itself is exercised in Chromium by test_playground_browser.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from openenv.core.env_server.security import bearer_subprotocol
from openenv.core.protocol import SUBPROTOCOL
from tests.support.server import REPO, RunningServer, serve
from tests.web.apps import KEY, PREFIX

WEB = {"ENABLE_WEB_INTERFACE": "true"}


@pytest.fixture(scope="module")
def web_server() -> Iterator[RunningServer]:
    # ENABLE_WEB_INTERFACE is read when the app is built, so the server may run in this process.
    with serve("tests.apps.counter:app", env=WEB, in_process=True) as server:
        yield server


@pytest.fixture(scope="module")
def plain_server() -> Iterator[RunningServer]:
    with serve("tests.apps.counter:app", env={"ENABLE_WEB_INTERFACE": "0"}, in_process=True) as s:
        yield s


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[RunningServer]:
    with serve("tests.web.apps:prefixed", in_process=True) as server:
        yield server


def test_page_and_relative_redirects(web_server: RunningServer) -> None:
    with httpx.Client(base_url=web_server.url, trust_env=False) as http:
        for path in ("/", "/web"):
            reply = http.get(path)
            assert reply.status_code == 307
            assert reply.headers["location"] == "web/"  # relative: a proxy's prefix is kept
        page = http.get("/web/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert '<script src="app.js">' in page.text
        assert http.get("/web/app.js").headers["content-type"].startswith("text/javascript")
        assert http.get("/web/config.json").json() == {
            "title": "counter_env playground",
            "env_name": "counter_env",
            "api_key_required": False,
            "renderer": False,
        }
        assert http.get("/web/renderer.js").content == b""
        assert http.get("/web/../pyproject.toml").status_code == 404
        assert http.get("/web/nothing.js").status_code == 404
        # The wire protocol is unchanged.
        assert http.post("/reset", json={"seed": 1}).status_code == 200


def test_disabled_by_default_and_never_imported(plain_server: RunningServer) -> None:
    with httpx.Client(base_url=plain_server.url, trust_env=False) as http:
        assert http.get("/web/").status_code == 404
        # `/` points to what there is instead of a bare 404 (docs/web.md).
        index = http.get("/")
        assert index.status_code == 200 and "/web" not in index.json()["routes"]
        assert "ENABLE_WEB_INTERFACE" in index.json()["web"]
    code = (
        "import sys; from tests.apps.counter import app; "
        "assert 'openenv.core.env_server.web' not in sys.modules, 'imported'"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


async def test_same_origin_page_may_open_a_session(web_server: RunningServer) -> None:
    async with connect(
        web_server.ws_url, origin=web_server.url, subprotocols=[SUBPROTOCOL], proxy=None
    ) as ws:
        assert '"session"' in str(await ws.recv())
        await ws.send('{"type": "reset", "id": 1}')
        assert '"observation"' in str(await ws.recv())
    with pytest.raises(InvalidStatus):  # another site's page may not
        async with connect(web_server.ws_url, origin="http://evil.example", proxy=None):
            pass


async def test_same_origin_is_not_enough_without_the_playground(
    plain_server: RunningServer,
) -> None:
    with pytest.raises(InvalidStatus):
        async with connect(plain_server.ws_url, origin=plain_server.url, proxy=None):
            pass


def test_api_key_leaves_the_page_open_and_the_api_closed(keyed_server: RunningServer) -> None:
    base = keyed_server.url + PREFIX
    with httpx.Client(trust_env=False) as http:
        assert http.get(base + "/web/").status_code == 200
        assert http.get(base + "/web/config.json").json()["api_key_required"] is True
        assert "registerRenderer" in http.get(base + "/web/renderer.js").text
        assert http.get(base + "/schema").status_code == 401
        auth = {"Authorization": f"Bearer {KEY}"}
        assert http.get(base + "/schema", headers=auth).status_code == 200


async def test_api_key_as_a_websocket_subprotocol(keyed_server: RunningServer) -> None:
    ws_url = keyed_server.url.replace("http://", "ws://") + PREFIX + "/ws"
    for wrong in ([SUBPROTOCOL], [SUBPROTOCOL, bearer_subprotocol("nope")]):
        with pytest.raises(InvalidStatus):
            async with connect(ws_url, origin=keyed_server.url, subprotocols=wrong, proxy=None):
                pass
    offered = [SUBPROTOCOL, bearer_subprotocol(KEY)]
    async with connect(ws_url, origin=keyed_server.url, subprotocols=offered, proxy=None) as ws:
        assert ws.subprotocol == SUBPROTOCOL  # the key is never echoed back
        assert '"session"' in str(await ws.recv())


def test_openenv_gradio_options_keep_working(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="openenv.server"):
        running = serve("tests.web.apps:titled", in_process=True)  # builds the app anew
        with running as server, httpx.Client(base_url=server.url, trust_env=False) as http:
            assert http.get("/web/config.json").json()["title"] == "Counter by hand"
            assert http.get("/web/").status_code == 200
    assert "gradio_builder is ignored" in caplog.text
