"""Validation errors quote bounded excerpts of their input; malformed frames are client errors."""

from __future__ import annotations

import json

import orjson
import pytest
from pydantic import BaseModel, ValidationError

from openenv.core import errors
from openenv.core.protocol import (
    ERROR_INPUT_CHARS,
    ERROR_INPUT_DEPTH,
    ERROR_INPUT_ITEMS,
    MAX_FIELD_ERRORS,
    EncodedReply,
    Rejected,
    Request,
    decode_request,
    dumps,
    encode_frame,
    error_excerpt,
    validation_errors,
)


class _Model(BaseModel):
    amount: int


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def test_excerpt_cuts_depth_items_and_text() -> None:
    deep = orjson.loads("[" * 1000 + "]" * 1000)
    assert _depth(error_excerpt(deep)) == ERROR_INPUT_DEPTH
    wide = error_excerpt(list(range(1000)))
    assert len(wide) == ERROR_INPUT_ITEMS + 1 and wide[-1].endswith("more")
    assert len(error_excerpt("x" * 10_000)) == ERROR_INPUT_CHARS + 3
    assert error_excerpt(2**80) == str(2**80)  # beyond what JSON encoders take as a number
    assert error_excerpt(b"\xff") == "b'\\xff'"
    small = {"a": [1, 2.5, None, True, "s"]}
    assert error_excerpt(small) == small  # ordinary inputs are quoted as they are


@pytest.mark.parametrize("depth", [300, 1000])
def test_validation_errors_of_deep_input_encode(depth: int) -> None:
    with pytest.raises(ValidationError) as info:
        _Model.model_validate({"amount": orjson.loads("[" * depth + "]" * depth)})
    [error] = validation_errors(info.value)
    assert error["loc"] == ["amount"] and error["type"] == "int_type"
    assert len(orjson.dumps(error)) < 200


def test_validation_errors_are_capped() -> None:
    class Many(BaseModel):
        values: list[int]

    with pytest.raises(ValidationError) as info:
        Many.model_validate({"values": ["x"] * 500})
    assert len(validation_errors(info.value)) == MAX_FIELD_ERRORS


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "reset", "data": {"episode_id": 5}},
        {"type": "reset", "data": {"episode_id": {"a": 1}}},
        {"type": "reset", "data": {"seed": -1}},
        {"type": "step", "data": {"x": 1}, "options": {"timeout_s": "soon"}},
        {"type": "step", "data": {"x": 1}, "options": {"timeout_s": 0}},
        {"type": "step", "id": "i" * 256, "data": {"x": 1}},
    ],
)
def test_malformed_frames_are_validation_errors(frame: dict) -> None:
    rejected = decode_request(json.dumps(frame))
    assert isinstance(rejected, Rejected)
    data = json.loads(rejected.frame)["data"]
    assert data["code"] == "VALIDATION_ERROR" and data["category"] == "client"


def test_reset_arguments_keep_extras_and_coerce_like_http() -> None:
    decoded = decode_request('{"type":"reset","data":{"seed":"7","episode_id":"e","mode":"x"}}')
    assert isinstance(decoded, Request)
    assert decoded.data == {"seed": 7, "episode_id": "e", "mode": "x"}
    decoded = decode_request('{"type":"step","data":{"x":1},"options":{"timeout_s":2,"k":1}}')
    assert isinstance(decoded, Request)
    assert decoded.options == {"timeout_s": 2.0, "k": 1}


def test_reply_evicted_is_an_infrastructure_error() -> None:
    exc = errors.error_from_data(errors.ReplyEvictedError("gone").to_data())
    assert isinstance(exc, errors.ReplyEvictedError)
    assert exc.http_status == 410 and errors.is_infrastructure_error(exc)


@pytest.mark.parametrize("request_id", [None, 7, 'a"b'])
def test_encoded_reply_matches_encoding_the_whole_frame(request_id: object) -> None:
    data = {"observation": {"x": [1, 2]}, "reward": 0.5, "done": False, "metadata": {}}
    reply = EncodedReply("observation", dumps(data))
    assert reply.frame(request_id) == encode_frame("observation", data, request_id)  # type: ignore[arg-type]
    assert reply.with_field("session_id", "s") == dumps({**data, "session_id": "s"})
    assert EncodedReply("state", b"{}").with_field("k", 1) == b'{"k":1}'
