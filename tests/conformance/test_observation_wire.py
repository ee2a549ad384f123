"""Every reset and step reply is `protocol.encode_observation`'s, byte for byte, on every transport.

Real servers, real frames: the bytes of WebSocket replies (plain, with ids, re-sent ids, binary
frames) and of HTTP bodies (stateless, in a session, idempotent steps) are compared with what
the protocol's one encoder makes of the same observation, built here from the environment's
deterministic rules, and one reply of each kind with the bytes OpenEnv 0.10 clients read today.
"""

from __future__ import annotations

import asyncio
import random

import httpx

from openenv.core.protocol import (
    BINARY_SUBPROTOCOL,
    NEW_SESSION,
    SESSION_HEADER,
    SUBPROTOCOL,
    decode_reply,
    encode_observation,
    encode_request,
)
from tests.apps.counter import CounterObservation
from tests.apps.frames import FramesObservation
from tests.support.server import RunningServer

from .helpers import TIMEOUT, ws_connect

SEED = 5
START = random.Random(SEED).randint(0, 1000)  # the counter env's first count for SEED


def _reset_obs() -> CounterObservation:
    return CounterObservation(count=START, reward=0, done=False, metadata={"start": START})


def _step_obs(count: int, steps: int) -> CounterObservation:
    return CounterObservation(
        count=count,
        history_length=steps,
        reward=count % 2 == 0,
        done=False,
        metadata={"step": steps},
    )


async def _exchange(ws, frame: str) -> str | bytes:
    await ws.send(frame)
    return await asyncio.wait_for(ws.recv(), TIMEOUT)


def test_the_wire_format_is_openenvs(counter_server: RunningServer) -> None:
    """The bytes themselves (not only the encoder's agreement with itself): what OpenEnv 0.10
    clients read, with the extensions' `id` and `session_id` at the end."""
    assert encode_observation(_reset_obs()).frame(7, binary=False) == (
        b'{"type":"observation","data":{"observation":{"metadata":{"start":637},"count":637,'
        b'"history_length":0},"reward":0,"done":false,"metadata":{"start":637}},"id":7}'
    )
    assert encode_observation(_reset_obs()).body("sid-1") == (
        b'{"observation":{"metadata":{"start":637},"count":637,"history_length":0},"reward":0,'
        b'"done":false,"metadata":{"start":637},"session_id":"sid-1"}'
    )
    with httpx.Client(base_url=counter_server.url, timeout=TIMEOUT) as http:
        stateless = http.post("/reset", json={"seed": SEED})
    assert stateless.status_code == 200
    assert stateless.content == (
        b'{"observation":{"metadata":{"start":637},"count":637,"history_length":0},"reward":0,'
        b'"done":false,"metadata":{"start":637}}'
    )


async def test_websocket_replies_are_the_encoders_frames(counter_server: RunningServer) -> None:
    async with ws_connect(counter_server.ws_url) as ws:  # OpenEnv's plain protocol: no ids
        raw = await _exchange(ws, encode_request("reset", {"seed": SEED}))
        assert raw.encode() == encode_observation(_reset_obs()).frame(binary=False)
        raw = await _exchange(ws, encode_request("step", {"amount": 2}))
        assert raw.encode() == encode_observation(_step_obs(START + 2, 1)).frame(binary=False)
        await ws.send(encode_request("close"))
    async with ws_connect(counter_server.ws_url, subprotocols=[SUBPROTOCOL]) as ws:
        assert decode_reply(await asyncio.wait_for(ws.recv(), TIMEOUT)).kind == "session"
        raw = await _exchange(ws, encode_request("reset", {"seed": SEED}, "r1"))
        assert raw.encode() == encode_observation(_reset_obs()).frame("r1", binary=False)
        expected = encode_observation(_step_obs(START + 3, 1)).frame(2, binary=False)
        assert (await _exchange(ws, encode_request("step", {"amount": 3}, 2))).encode() == expected
        # A re-sent id is answered from the reply the session kept: the same bytes.
        assert (await _exchange(ws, encode_request("step", {"amount": 3}, 2))).encode() == expected
        await ws.send(encode_request("close"))


async def test_http_bodies_are_the_encoders_bodies(counter_server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=counter_server.url, timeout=TIMEOUT) as http:
        opened = await http.post(
            "/reset", json={"seed": SEED}, headers={SESSION_HEADER: NEW_SESSION}
        )
        sid = opened.headers[SESSION_HEADER]
        assert opened.content == encode_observation(_reset_obs()).body(sid)
        headers = {SESSION_HEADER: sid}
        step = await http.post("/step", json={"action": {"amount": 4}}, headers=headers)
        assert step.content == encode_observation(_step_obs(START + 4, 1)).body(sid)
        once = {"action": {"amount": 1}, "request_id": "h1"}
        expected = encode_observation(_step_obs(START + 5, 2)).body(sid)
        assert (await http.post("/step", json=once, headers=headers)).content == expected
        assert (await http.post("/step", json=once, headers=headers)).content == expected
        await http.delete(f"/sessions/{sid}")


async def test_binary_frames_and_json_bodies_of_one_observation(
    frames_server: RunningServer,
) -> None:
    """An observation holding bytes: a binary frame for a connection that negotiated them,
    base64 JSON on a plain one and over HTTP, all from the same encoder."""
    obs = FramesObservation(frame=bytes(range(16)), done=False, reward=0.0)
    step = {"size": 16}
    async with ws_connect(
        frames_server.ws_url, subprotocols=[BINARY_SUBPROTOCOL, SUBPROTOCOL]
    ) as ws:
        await asyncio.wait_for(ws.recv(), TIMEOUT)  # the session frame
        await _exchange(ws, encode_request("reset", {}, 1))
        raw = await _exchange(ws, encode_request("step", step, 2))
        assert raw == encode_observation(obs, binary=True).frame(2, binary=True)
        assert isinstance(raw, bytes)
        await ws.send(encode_request("close"))
    async with ws_connect(frames_server.ws_url) as ws:
        await _exchange(ws, encode_request("reset", {}))
        raw = await _exchange(ws, encode_request("step", step))
        assert raw.encode() == encode_observation(obs).frame(binary=False)
    async with httpx.AsyncClient(base_url=frames_server.url, timeout=TIMEOUT) as http:
        body = await http.post("/step", json={"action": step})
        assert body.content == encode_observation(obs).body()
