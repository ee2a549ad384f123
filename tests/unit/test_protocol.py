"""The protocol module driven without sockets: bytes in, typed messages out, and back."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from openenv.core import errors
from openenv.core.env_server.types import Observation
from openenv.core.protocol import (
    CLOSE_CODES,
    CLOSE_RESTART,
    ERROR_CATEGORY,
    HTTP_STATUS,
    MCP_SESSION_HEADER,
    REQUEST_MODELS,
    SESSION_HEADER,
    ErrorCategory,
    ObservationReply,
    Rejected,
    Reply,
    Request,
    WSErrorCode,
    decode_observation,
    decode_reply,
    decode_request,
    dumps,
    encode_closed,
    encode_error,
    encode_frame,
    encode_mcp,
    encode_observation,
    encode_request,
    encode_session,
    encode_state,
    error_category,
    error_data,
    observation_data,
    session_id_from_rpc,
    session_id_from_scope,
    ws_session_url,
)
from tests.support.envs import env_dirs, installed


def _error(frame: bytes) -> dict[str, Any]:
    msg = json.loads(frame)
    assert msg["type"] == "error"
    return msg


# --- codes --------------------------------------------------------------------------------


def test_every_code_has_a_category_and_a_status() -> None:
    assert set(ERROR_CATEGORY) == set(WSErrorCode) == set(HTTP_STATUS)
    assert error_category("TIMEOUT") is ErrorCategory.INFRASTRUCTURE
    assert error_category("NOT_A_CODE") is ErrorCategory.INFRASTRUCTURE  # never a reward


def test_openenv_codes_keep_their_names() -> None:
    openenv = {"INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR"}
    openenv |= {"CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR"}
    assert openenv <= {code.value for code in WSErrorCode}


def test_error_data_puts_category_last_over_extras() -> None:
    data = error_data("EXECUTION_ERROR", "boom", category="client", method="step")
    assert data == {
        "message": "boom",
        "code": "EXECUTION_ERROR",
        "method": "step",
        "category": "environment",
    }


# --- one exception per code, both ends ---------------------------------------------------------


@pytest.mark.parametrize("code", list(WSErrorCode))
def test_error_round_trips_through_its_data(code: WSErrorCode) -> None:
    received = errors.error_from_data(error_data(code, "went wrong", hint=3))
    assert received.code == code.value
    assert received.category == ERROR_CATEGORY[code].value
    assert received.data["hint"] == 3
    assert errors.error_from_data(received.to_data()).to_data() == received.to_data()
    assert received.http_status == HTTP_STATUS[code]


def test_server_raised_errors_carry_their_code_and_extras() -> None:
    invalid = errors.InvalidActionError("x out of range", errors=[{"loc": ["x"], "msg": "big"}])
    data = invalid.to_data()
    assert data["code"] == "VALIDATION_ERROR" and data["category"] == "client"
    assert data["errors"] == [{"loc": ["x"], "msg": "big"}] and data["detail"] == "x out of range"
    assert isinstance(errors.error_from_data(data), errors.InvalidRequestError)

    judged = errors.RewardError("judge down", category="infrastructure")
    assert judged.to_data()["category"] == "infrastructure"
    assert errors.is_infrastructure_error(errors.error_from_data(judged.to_data()))
    assert not errors.is_infrastructure_error(
        errors.error_from_data(errors.RewardError("x").to_data())
    )


def test_connection_failures_are_connection_errors() -> None:
    for cls in (errors.ServerUnreachableError, errors.ConnectionLostError):
        exc = cls("nobody home")
        assert isinstance(exc, ConnectionError) and isinstance(exc, errors.OpenEnvError)
        assert errors.is_infrastructure_error(exc) and exc.retryable


# --- client frames, decoded by the server -------------------------------------------------------


def test_request_round_trip() -> None:
    for kind, data in [("reset", {"seed": 1}), ("step", {"x": 1}), ("mcp", {"jsonrpc": "2.0"})]:
        for rid in (None, 7, "a"):
            decoded = decode_request(encode_request(kind, data, rid))  # type: ignore[arg-type]
            assert decoded == Request(kind, data, rid)  # type: ignore[arg-type]
    assert decode_request(encode_request("state", {"ignored": 1}, 2)) == Request("state", None, 2)
    assert decode_request(encode_request("close")) == Request("close", None, None)


def test_step_options_travel_with_the_step() -> None:
    frame = encode_request("step", {"x": 1}, 3, {"timeout_s": 2.5})
    assert decode_request(frame) == Request("step", {"x": 1}, 3, {"timeout_s": 2.5})


def test_reset_without_data_is_an_empty_reset() -> None:
    assert decode_request('{"type":"reset"}') == Request("reset", {}, None)


@pytest.mark.parametrize(
    ("raw", "code", "echoed_id"),
    [
        ("{not json", "INVALID_JSON", None),
        ("[1, 2]", "VALIDATION_ERROR", None),
        ('{"type": "jump", "id": 4}', "UNKNOWN_TYPE", 4),
        ('{"data": {}}', "UNKNOWN_TYPE", None),
        ('{"type": "step", "id": 5}', "VALIDATION_ERROR", 5),
        ('{"type": "step", "data": [1], "id": "s"}', "VALIDATION_ERROR", "s"),
        ('{"type": "step", "data": {}, "extra": 1}', "VALIDATION_ERROR", None),
        ('{"type": "state", "id": [1]}', "VALIDATION_ERROR", [1]),
        ('{"type": "reset", "data": 3}', "VALIDATION_ERROR", None),
    ],
)
def test_bad_frames_are_typed_errors(raw: str, code: str, echoed_id: Any) -> None:
    rejected = decode_request(raw)
    assert isinstance(rejected, Rejected)
    msg = _error(rejected.frame)
    assert msg["data"]["code"] == code
    assert msg["data"]["category"] == "client"
    assert msg.get("id") == echoed_id


def test_validation_errors_name_the_field() -> None:
    rejected = decode_request('{"type": "step", "data": {}, "options": 3}')
    assert isinstance(rejected, Rejected)
    data = _error(rejected.frame)["data"]
    assert data["errors"][0]["loc"] == ["options"]
    assert data["detail"].startswith("Invalid message: options")


def test_fast_path_agrees_with_the_models() -> None:
    """Frames the decoder accepts without the model are exactly those the model accepts."""
    samples = [
        {"type": "step", "data": {}},
        {"type": "step", "data": {"a": 1}, "id": 1},
        {"type": "step", "data": {"a": 1}, "id": "x"},
        {"type": "step", "data": {}, "id": 1.5},
        {"type": "step", "data": {}, "id": True},
        {"type": "step", "data": None},
        {"type": "step", "data": {}, "more": 1},
    ]
    for msg in samples:
        model_ok = True
        try:
            REQUEST_MODELS["step"].model_validate(msg)
        except ValueError:
            model_ok = False
        assert isinstance(decode_request(json.dumps(msg)), Request) == model_ok, msg


# --- server frames, decoded by the client --------------------------------------------------------


def test_reply_round_trip() -> None:
    frame = encode_frame("observation", {"observation": {}, "reward": True, "done": False}, 9)
    assert decode_reply(frame) == Reply(
        "observation", {"observation": {}, "reward": True, "done": False}, 9
    )
    err = decode_reply(encode_error("CAPACITY_REACHED", "full"))
    assert err.is_error and err.id is None and err.data["category"] == "infrastructure"
    assert decode_reply('{"type": "closed"}') == Reply("closed", {}, None)


@pytest.mark.parametrize(
    "raw",
    ['"text"', '{"type": "surprise", "data": {}}', '{"type": "state", "data": [1]}', "{}"],
)
def test_malformed_replies_raise(raw: str) -> None:
    with pytest.raises(ValueError):
        decode_reply(raw)


# --- observation replies: one encoder for every transport --------------------------------------


class _Obs(Observation):
    text: str = ""
    blob: bytes | None = None


_OBSERVATIONS = [
    _Obs(text='é"x', reward=0.5, metadata={"k": [1, 2]}),
    _Obs(reward=True, done=True),
    _Obs(reward=None, blob=b"\x00\xff"),
]


@pytest.mark.parametrize("obs", _OBSERVATIONS)
@pytest.mark.parametrize("request_id", [None, 0, 7, -3, 2**63 - 1, 'a"b', "", True])
def test_an_observation_frame_is_the_whole_frame_encoded(obs: Observation, request_id: Any) -> None:
    data = observation_data(obs)
    reply = encode_observation(obs)
    assert reply.kind == "observation" and reply.payload == dumps(data)
    assert reply.frame(request_id, binary=False) == encode_frame("observation", data, request_id)
    decoded = decode_reply(reply.frame(request_id, binary=False))
    assert decoded.id == request_id and decode_observation(decoded.data).done is obs.done


@pytest.mark.parametrize("obs", _OBSERVATIONS)
def test_an_http_body_is_the_payload_with_the_session_id_last(obs: Observation) -> None:
    data = observation_data(obs)
    assert encode_observation(obs).body() == dumps(data)
    assert encode_observation(obs).body("w1.s") == dumps({**data, "session_id": "w1.s"})
    # Attachments of a binary reply go back inline: HTTP is JSON only.
    assert encode_observation(obs, binary=True).body("w1.s") == dumps(
        {**data, "session_id": "w1.s"}
    )


def test_observation_data_is_openenvs_shape() -> None:
    data = observation_data(_Obs(text="t", reward=1, metadata={"m": 1}))
    assert data == {
        "observation": {"metadata": {"m": 1}, "text": "t", "blob": None},
        "reward": 1,
        "done": False,
        "metadata": {"m": 1},
    }
    read = decode_observation(data)
    assert read == ObservationReply({"text": "t", "blob": None}, 1, False, {"m": 1})
    # The top-level metadata wins; without it the observation's own is read (OpenEnv 0.10).
    assert decode_observation({"observation": {"metadata": {"a": 1}}}).metadata == {"a": 1}
    with pytest.raises(ValueError):
        decode_observation({"reward": 1})


def test_an_unencodable_observation_is_a_type_error() -> None:
    class Odd(Observation):
        thing: Any = None

    with pytest.raises(TypeError):
        encode_observation(Odd(thing=object()))


def test_session_and_closed_frames_are_replies() -> None:
    frame = encode_session(
        "w1.s",
        resumed=False,
        resume_grace_s=60.0,
        session_timeout_s=None,
        step_count=0,
        resume_token="t",
    )
    reply = decode_reply(frame)
    assert reply.kind == "session" and reply.data["session_id"] == "w1.s"
    assert set(reply.data) == {
        "session_id",
        "resumed",
        "resume_grace_s",
        "session_timeout_s",
        "step_count",
        "resume_token",
    }
    assert decode_reply(encode_closed(4)) == Reply("closed", {}, 4)
    assert decode_reply(encode_state({"step_count": 1}).frame(2)) == Reply(
        "state", {"step_count": 1}, 2
    )
    assert decode_reply(encode_mcp({"jsonrpc": "2.0"}).frame()) == Reply(
        "mcp", {"jsonrpc": "2.0"}, None
    )


def test_close_codes_are_distinct_and_in_range() -> None:
    assert len(set(CLOSE_CODES.values())) == len(CLOSE_CODES)
    assert all(1000 <= code < 5000 for code in CLOSE_CODES)
    assert CLOSE_CODES[CLOSE_RESTART] == "CLOSE_RESTART" and CLOSE_RESTART == 1012


# --- where session ids travel -----------------------------------------------------------------


def _scope(headers: dict[str, str] | None = None, query: str = "") -> dict[str, Any]:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return {"headers": raw, "query_string": query.encode()}


def test_session_id_carriage() -> None:
    assert session_id_from_scope(_scope({SESSION_HEADER: "abc"}, "session_id=zzz")) == "abc"
    assert session_id_from_scope(_scope({MCP_SESSION_HEADER: "m1"})) == "m1"
    assert session_id_from_scope(_scope(query="a=1&session_id=w0.x%2By")) == "w0.x+y"
    assert session_id_from_scope(_scope(query="session_id=")) is None
    assert session_id_from_scope(_scope()) is None
    assert session_id_from_rpc({"session_id": "s"}) == "s"
    assert session_id_from_rpc({"session_id": 12}) == "12"
    assert session_id_from_rpc({}) is None and session_id_from_rpc(None) is None


def test_ws_url_round_trips_odd_session_ids() -> None:
    sid = "w1.a b&c=d/é"
    url = ws_session_url("ws://host:1/ws", sid)
    parts = urlsplit(url)
    assert parts.path == "/ws" and parse_qs(parts.query) == {"session_id": [sid]}
    scope = {"headers": [], "query_string": parts.query.encode()}
    assert session_id_from_scope(scope) == sid
    assert ws_session_url("ws://host:1/ws", None) == "ws://host:1/ws"


# --- no I/O, no server stack --------------------------------------------------------------------


def test_protocol_and_typed_clients_import_no_server_framework() -> None:
    """Trainers import clients in many processes: no client may load the server stack."""
    heavy = ["fastapi", "starlette", "uvicorn", "fastmcp", "mcp", "websockets", "httpx"]
    envs = sorted(p.name for p in env_dirs() if installed(p.name))
    assert "echo_env" in envs
    code = (
        "import sys\n"
        "import openenv.core.protocol, openenv.core.errors\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
        "from openenv.core import EnvClient, GenericEnvClient, MCPToolClient\n"
        f"for name in {envs!r}:\n"
        "    __import__(name)\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == ["[]", "[]"]
