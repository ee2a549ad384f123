"""Hostile or malformed input gets a typed error, over every transport, and loses nothing.

Issue 11: JSON nested ~300 levels in an invalid field dropped the WebSocket without a close frame
(the error serializer hit its recursion limit) and lost the episode; over HTTP it was a
plain-text 500, as was `{"seed": NaN}`; a WebSocket reset with a malformed `episode_id` was
blamed on the environment. Every test here also checks that the session that erred continues.
"""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
import pytest

from tests.support.server import RunningServer

from .helpers import TIMEOUT, assert_error, assert_observation_frame, request, ws_connect

JSON = {"content-type": "application/json"}


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def nested_objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


async def _continues(ws: Any, count: int) -> None:
    """The session still steps, and its episode is the one it was (nothing was lost)."""
    frame = await request(ws, {"type": "step", "data": {"amount": 1}})
    data = assert_observation_frame(frame)
    assert data["observation"]["count"] == count, frame


def _typed_json(response: httpx.Response) -> Any:
    assert response.headers["content-type"].startswith("application/json"), response.text[:200]
    return response.json()


# -- WebSocket ------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [300, 1000])
@pytest.mark.parametrize("shape", ["lists", "objects"])
async def test_deeply_nested_invalid_field_is_a_validation_error(
    counter_server: RunningServer, depth: int, shape: str
) -> None:
    value = nested(depth) if shape == "lists" else nested_objects(depth)
    async with ws_connect(counter_server.ws_url) as ws:
        await request(ws, {"type": "reset", "data": {"seed": None}})
        await _continues(ws, 1)
        await ws.send('{"type":"step","data":{"amount":' + value + "}}")
        data = assert_error(json.loads(await ws.recv()), "VALIDATION_ERROR", "client")
        assert data["errors"][0]["loc"] == ["amount"]
        assert len(json.dumps(data)) < 4096  # an excerpt of the input, not all of it
        # The same input in reset arguments, in step options and in an MCP request.
        await ws.send('{"type":"reset","data":{"episode_id":' + value + "}}")
        assert_error(json.loads(await ws.recv()), "VALIDATION_ERROR", "client")
        await ws.send('{"type":"step","data":{"amount":1},"options":{"timeout_s":' + value + "}}")
        assert_error(json.loads(await ws.recv()), "VALIDATION_ERROR", "client")
        await _continues(ws, 2)


async def test_nesting_beyond_the_decoder_limit_is_invalid_json(
    counter_server: RunningServer,
) -> None:
    async with ws_connect(counter_server.ws_url) as ws:
        await request(ws, {"type": "reset"})
        await ws.send('{"type":"step","data":{"amount":' + nested(5000) + "}}")
        data = assert_error(json.loads(await ws.recv()), "INVALID_JSON", "client")
        assert "depth" in data["message"]
        await _continues(ws, 1)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_nan_and_infinity_are_invalid_json(counter_server: RunningServer, literal) -> None:
    async with ws_connect(counter_server.ws_url) as ws:
        await request(ws, {"type": "reset"})
        await ws.send('{"type":"reset","data":{"seed":' + literal + "}}")
        assert_error(json.loads(await ws.recv()), "INVALID_JSON", "client")
        await _continues(ws, 1)


@pytest.mark.parametrize(
    ("arguments", "loc"),
    [
        ({"episode_id": 5}, ["episode_id"]),
        ({"episode_id": {"nested": ["object"]}}, ["episode_id"]),
        ({"episode_id": "x" * 300}, ["episode_id"]),
        ({"seed": "not a number"}, ["seed"]),
        ({"seed": -1}, ["seed"]),
    ],
)
async def test_malformed_reset_arguments_are_the_clients_error(
    counter_server: RunningServer, arguments: dict[str, Any], loc: list[str]
) -> None:
    async with ws_connect(counter_server.ws_url) as ws:
        await request(ws, {"type": "reset", "data": {"seed": 1}})
        start = (await request(ws, {"type": "state"}))["data"]["count"]
        frame = await request(ws, {"type": "reset", "id": "bad", "data": arguments})
        data = assert_error(frame, "VALIDATION_ERROR", "client", has_id="bad")
        assert data["errors"][0]["loc"] == loc
        assert "reset" in data["detail"]
        await _continues(ws, start + 1)  # the episode was not reset


async def test_malformed_step_options_are_the_clients_error(
    counter_server: RunningServer,
) -> None:
    async with ws_connect(counter_server.ws_url) as ws:
        await request(ws, {"type": "reset"})
        frame = await request(
            ws, {"type": "step", "data": {"amount": 1}, "options": {"timeout_s": "soon"}}
        )
        assert_error(frame, "VALIDATION_ERROR", "client")
        await _continues(ws, 1)


async def test_overlong_request_id_is_refused(counter_server: RunningServer) -> None:
    async with ws_connect(counter_server.ws_url) as ws:
        await request(ws, {"type": "reset"})
        frame = await request(ws, {"type": "step", "id": "i" * 10_000, "data": {"amount": 1}})
        data = assert_error(frame, "VALIDATION_ERROR", "client")
        assert "255" in data["message"]
        await _continues(ws, 1)


async def test_resumable_session_survives_deep_input(counter_server: RunningServer) -> None:
    async with ws_connect(f"{counter_server.ws_url}?resumable=1") as ws:
        assert json.loads(await ws.recv())["type"] == "session"
        await request(ws, {"type": "reset", "id": 1})
        await ws.send('{"type":"step","id":2,"data":{"amount":' + nested(900) + "}}")
        assert_error(json.loads(await ws.recv()), "VALIDATION_ERROR", "client", has_id=2)
        frame = await request(ws, {"type": "step", "id": 3, "data": {"amount": 2}})
        assert frame["data"]["observation"]["count"] == 2


async def test_websocket_mcp_refuses_oversized_frames(counter_server: RunningServer) -> None:
    url = counter_server.url.replace("http://", "ws://") + "/mcp"
    async with ws_connect(url) as ws:
        big = '{"jsonrpc":"2.0","method":"ping","id":1,"params":{"x":"' + "y" * 20_000 + '"}}'
        reply = await request(ws, big)
        assert reply["error"]["code"] == -32600 and "exceeds" in reply["error"]["message"]
        assert (await request(ws, {"jsonrpc": "2.0", "method": "ping", "id": 2}))["result"] == {}


async def test_action_model_bug_is_a_typed_server_error(limits_server: RunningServer) -> None:
    async with ws_connect(limits_server.ws_url) as ws:
        await request(ws, {"type": "reset"})
        frame = await request(ws, {"type": "step", "data": {"size": -7}})
        assert_error(frame, "SESSION_ERROR", "infrastructure")
        frame = await request(ws, {"type": "step", "data": {"size": 3}})
        assert frame["data"]["observation"]["payload"] == "xxx"


# -- HTTP -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "loc"),
    [
        ("/step", '{"action":{"amount":' + nested(300) + "}}", ["amount"]),
        ("/step", '{"action":{"amount":' + nested_objects(1000) + "}}", ["amount"]),
        ("/reset", '{"seed":' + nested(300) + "}", ["body", "seed"]),
        ("/reset", '{"episode_id":' + nested_objects(600) + "}", ["body", "episode_id"]),
        ("/step", '{"action":{"amount":1},"timeout_s":' + nested(300) + "}", ["body", "timeout_s"]),
    ],
)
def test_http_deep_input_is_422_with_excerpts(
    counter_server: RunningServer, path: str, body: str, loc: list[str]
) -> None:
    response = httpx.post(counter_server.url + path, content=body, headers=JSON, timeout=TIMEOUT)
    assert response.status_code == 422, response.text[:300]
    detail = _typed_json(response)["detail"]
    assert detail[0]["loc"] == loc
    assert len(response.content) < 4096


@pytest.mark.parametrize(
    "body",
    [
        '{"seed": NaN}',
        '{"seed": Infinity}',
        '{"seed": -Infinity}',
        '{"seed": 1e400}',
        '{"extra": NaN}',
        nested(5000),
        "{nope",
        b"\xff\xfe{}",
    ],
)
def test_http_body_that_is_not_strict_json_is_json_invalid(
    counter_server: RunningServer, body: Any
) -> None:
    for path in ("/reset", "/step"):
        response = httpx.post(
            counter_server.url + path, content=body, headers=JSON, timeout=TIMEOUT
        )
        assert response.status_code == 422, response.text[:300]
        assert _typed_json(response)["detail"][0]["type"] == "json_invalid"


def test_http_reset_with_malformed_episode_id_is_422(counter_server: RunningServer) -> None:
    response = httpx.post(
        counter_server.url + "/reset", json={"episode_id": {"a": 1}}, timeout=TIMEOUT
    )
    assert response.status_code == 422
    assert _typed_json(response)["detail"][0]["loc"] == ["body", "episode_id"]


def test_http_server_fault_is_a_typed_500(limits_server: RunningServer) -> None:
    """A bug in the action model (a TypeError, not a validation error) is still answered with
    the typed JSON body, not a plain-text page, and the connection and server keep serving."""
    with httpx.Client(base_url=limits_server.url, timeout=TIMEOUT) as http:
        for _ in range(3):
            response = http.post("/step", json={"action": {"size": -7}})
            assert response.status_code == 500
            detail = _typed_json(response)["detail"]
            assert detail["code"] == "SESSION_ERROR"
            assert detail["category"] == "infrastructure"
            ok = http.post("/step", json={"action": {"size": 2}})
            assert ok.status_code == 200


# -- fuzzing ----------------------------------------------------------------------------------

FUZZ_SEED = 11
FUZZ_FRAMES = 150


def _junk(rng: random.Random) -> str | bytes:
    """A frame or body that is almost, or not at all, a message of the protocol."""
    pieces = [
        "{",
        "}",
        "[",
        "]",
        '"type"',
        '"step"',
        '"reset"',
        '"mcp"',
        '"data"',
        '"id"',
        ":",
        ",",
        "null",
        "true",
        "NaN",
        "1e999",
        "-0",
        '"\\ud800"',
        '"\\u0000"',
        "18446744073709551616",
        '"amount"',
        '"seed"',
        '"episode_id"',
        '"options"',
        '"jsonrpc"',
        '"2.0"',
        '"method"',
        '"tools/call"',
        '"params"',
    ]
    kind = rng.randrange(5)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if kind == 1:
        return "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30)))
    message: dict[str, Any] = {"type": rng.choice(["reset", "step", "state", "mcp", "x", 7])}
    values: list[Any] = [
        None,
        -1,
        2**70,
        "s",
        [],
        {},
        {"amount": "x"},
        {"amount": 2**70},
        {"seed": -5},
        {"episode_id": 3},
        {"jsonrpc": "2.0", "method": "tools/call", "id": 1, "params": {"name": 3}},
        json.loads(nested(rng.randrange(1, 900))),
    ]
    if rng.random() < 0.8:
        message["data"] = rng.choice(values)
    if rng.random() < 0.4:
        message["id"] = rng.choice(values[:6])
    if rng.random() < 0.3:
        message["options"] = rng.choice(values)
    text = json.dumps(message)
    if kind == 3 and len(text) > 2:  # cut short
        return text[: rng.randrange(1, len(text))]
    return text


async def test_fuzzed_frames_get_typed_errors_and_the_session_survives(
    counter_server: RunningServer,
) -> None:
    rng = random.Random(FUZZ_SEED)
    async with ws_connect(counter_server.ws_url) as ws:
        await request(ws, {"type": "reset"})
        steps = 0
        for _ in range(FUZZ_FRAMES):
            junk = _junk(rng)
            await ws.send(junk)
            frame = json.loads(await ws.recv())
            assert frame["type"] in ("error", "observation", "state", "mcp"), (junk, frame)
            if frame["type"] == "error":
                assert frame["data"]["code"] != "SESSION_ERROR", (junk, frame)
            if frame["type"] == "observation" and "count" in frame["data"]["observation"]:
                steps = frame["data"]["observation"]["count"]
        await _continues(ws, steps + 1)


async def test_fuzzed_http_bodies_get_typed_json_replies(counter_server: RunningServer) -> None:
    rng = random.Random(FUZZ_SEED)
    async with httpx.AsyncClient(base_url=counter_server.url, timeout=TIMEOUT) as http:
        for i in range(FUZZ_FRAMES):
            junk = _junk(rng)
            path = ("/reset", "/step", "/mcp")[i % 3]
            response = await http.post(path, content=junk, headers=JSON)
            assert response.status_code < 500, (path, junk, response.text[:300])
            _typed_json(response)
        assert (await http.get("/health")).status_code == 200
