"""The production `/harness` WebSocket over a real server and real frames."""

from __future__ import annotations

import json

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.support.server import serve

APP = "tests.harness.harness_app:app"
KEY = "harness-test-key"


@pytest.fixture(scope="module")
def production():
    with serve(APP, env={"OPENENV_MODE": "production"}, in_process=True) as server:
        yield server.url.replace("http://", "ws://") + "/harness"


def frames_until_turn_ends(ws) -> list[dict]:
    frames = []
    while True:
        frame = json.loads(ws.recv(timeout=60))
        frames.append(frame)
        if frame["type"] in ("turn_complete", "error", "protocol_error"):
            return frames


def test_a_conversation_streams_events_turn_by_turn(production):
    with connect(production) as ws:
        started = json.loads(ws.recv(timeout=60))
        assert started["type"] == "session_started"
        assert started["data"]["injected_tools"] == ["env_echo", "add"]
        ws.send(json.dumps({"type": "message", "content": 'call:add {"a": 1, "b": 2}'}))
        frames = frames_until_turn_ends(ws)
        assert [f["type"] for f in frames] == [
            "tool_call",
            "tool_result",
            "text_output",
            "turn_complete",
        ]
        assert frames[1]["data"]["result"] == 3
        ws.send(json.dumps({"type": "message", "content": "second"}))
        last = frames_until_turn_ends(ws)[-1]
        assert last["data"]["response"] == 'call:add {"a": 1, "b": 2} | second'


def test_events_arrive_while_the_turn_is_still_running(production, tmp_path):
    release = tmp_path / "release"
    with connect(production) as ws:
        json.loads(ws.recv(timeout=60))
        ws.send(json.dumps({"type": "message", "content": f"pause:{release}"}))
        first = json.loads(ws.recv(timeout=60))
        # The harness is still waiting for `release`: this frame was not held back.
        assert first == {**first, "type": "text_output", "data": {"text": "paused"}}
        release.touch()
        assert frames_until_turn_ends(ws)[-1]["type"] == "turn_complete"


def test_a_bad_frame_gets_a_protocol_error_and_the_connection_stays_usable(production):
    with connect(production) as ws:
        json.loads(ws.recv(timeout=60))
        for bad in ("not json", json.dumps({"type": "step", "content": "x"}), json.dumps({})):
            ws.send(bad)
            reply = json.loads(ws.recv(timeout=60))
            assert reply["type"] == "protocol_error"
            assert reply["data"]["code"] == "INVALID_MESSAGE" and reply["data"]["message"]
        ws.send(json.dumps({"type": "message", "content": "ok"}))
        assert frames_until_turn_ends(ws)[-1]["data"]["response"] == "ok"


def test_a_failed_turn_sends_a_terminal_error_and_closes(production):
    with connect(production) as ws:
        json.loads(ws.recv(timeout=60))
        ws.send(json.dumps({"type": "message", "content": "crash"}))
        frames = frames_until_turn_ends(ws)
        assert frames[-1]["type"] == "error"
        assert frames[-1]["data"]["recoverable"] is False
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=60)
    # The slot was freed: a new connection gets a session.
    with connect(production) as ws:
        assert json.loads(ws.recv(timeout=60))["type"] == "session_started"


def test_no_harness_route_in_simulation_mode():
    with serve(APP, env={"OPENENV_MODE": "simulation"}, in_process=True) as server:
        url = server.url.replace("http://", "ws://") + "/harness"
        with pytest.raises(InvalidStatus), connect(url):
            pass


def test_the_api_key_guards_the_harness_route():
    env = {"OPENENV_MODE": "production", "OPENENV_API_KEY": KEY}
    with serve(APP, env=env, in_process=True) as server:
        url = server.url.replace("http://", "ws://") + "/harness"
        with pytest.raises(InvalidStatus), connect(url):
            pass
        with (
            pytest.raises(InvalidStatus),
            connect(
                url, additional_headers={"Authorization": f"Bearer {KEY}", "Origin": "https://evil"}
            ),
        ):
            pass
        with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            assert json.loads(ws.recv(timeout=60))["type"] == "session_started"
