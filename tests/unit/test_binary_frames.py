"""Binary frames (`openenv.v1.bin`): bytes and numpy arrays of a reply as raw attachments.

Bytes alone, no server: what a sender packs, a reader unpacks to the same values; a reply with
nothing to attach stays the JSON text every client reads; malformed frames are ValueErrors.
"""

from __future__ import annotations

import base64

import numpy as np
import pytest
from pydantic import BaseModel

from openenv.core.env_server import Observation, WireBytes
from openenv.core.protocol import (
    BINARY_MAGIC,
    EncodedReply,
    decode_reply,
    dumps,
    encode_payload,
    is_binary_frame,
    pack_binary,
    unpack_binary,
)


def _round_trip(value: object) -> object:
    header, blobs = encode_payload(value, binary=True)
    return unpack_binary(pack_binary(header, blobs))


def test_bytes_and_arrays_travel_raw_and_come_back() -> None:
    frame = np.arange(210 * 160 * 3, dtype=np.uint8).reshape(210, 160, 3)
    floats = np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)[:, ::2]  # not contiguous
    value = {
        "image": b"\x00\xff" * 10,
        "nested": [{"frame": frame}, {"floats": floats, "n": np.int64(3)}],
        "text": "ok",
        "empty": b"",
    }
    header, blobs = encode_payload(value, binary=True)
    assert len(blobs) == 4 and sum(len(b) for b in blobs) == 20 + frame.nbytes + floats.nbytes
    assert len(header) < 300  # the frame is not in the JSON
    back = _round_trip(value)
    assert isinstance(back, dict)
    assert back["image"] == value["image"] and back["empty"] == b"" and back["text"] == "ok"
    got = back["nested"][0]["frame"]
    assert got.dtype == np.uint8 and got.shape == (210, 160, 3) and np.array_equal(got, frame)
    got[0, 0, 0] = 7  # a writable array of its own
    assert np.array_equal(back["nested"][1]["floats"], floats)
    assert back["nested"][1]["n"] == 3


def test_nothing_to_attach_is_the_plain_json() -> None:
    value = {"observation": {"x": [1, 2], "s": "t", "n": np.float32(0.5)}, "reward": 1}
    header, blobs = encode_payload(value, binary=True)
    assert blobs == () and header == dumps(value)
    # Without the extension bytes are base64 text and arrays lists, as before.
    plain, none = encode_payload({"b": b"\x01", "a": np.arange(3)}, binary=False)
    assert none == () and plain == b'{"b":"AQ==","a":[0,1,2]}'


def test_replies_decode_from_binary_frames() -> None:
    reply = EncodedReply("observation", b'{"observation":{"img":{"$blob":0,"size":3}}}', (b"abc",))
    frame = reply.frame(7)
    assert is_binary_frame(frame) and frame.startswith(BINARY_MAGIC)
    decoded = decode_reply(frame)
    assert (decoded.kind, decoded.id) == ("observation", 7)
    assert decoded.data["observation"]["img"] == b"abc"
    assert not is_binary_frame(EncodedReply("state", b"{}").frame(1))
    # A JSON-only transport (HTTP) re-answering the stored reply gets JSON, bytes as base64
    assert reply.with_field("session_id", "s") == (
        b'{"observation":{"img":"YWJj"},"session_id":"s"}'
    )


@pytest.mark.parametrize(
    "raw",
    [
        BINARY_MAGIC + b"\x00\x00",  # no header length
        BINARY_MAGIC + (100).to_bytes(4, "big") + b"{}",  # header cut short
        pack_binary(b'{"a":{"$blob":0,"size":10}}', (b"abc",)),  # attachment cut short
        pack_binary(b'{"a":1}', (b"abc",)),  # bytes no placeholder names
        pack_binary(b'{"a":{"$blob":0,"size":3,"dtype":"<f8","shape":[3]}}', (b"abc",)),
        pack_binary(b"not json", ()),
    ],
)
def test_malformed_binary_frames_are_value_errors(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_reply(raw)


def test_wire_bytes_reads_raw_bytes_and_base64_text() -> None:
    class Frame(Observation):
        data: WireBytes | None = None

    raw = bytes(range(256))
    assert Frame(data=raw).data == raw
    assert Frame.model_validate({"data": base64.b64encode(raw).decode()}).data == raw
    assert Frame(data=raw).model_dump(mode="json")["data"] == base64.b64encode(raw).decode()
    assert Frame(data=raw).model_dump()["data"] == raw  # what the server encodes

    class Holder(BaseModel):
        frame: Frame

    assert (
        Holder.model_validate_json(Holder(frame=Frame(data=raw)).model_dump_json()).frame.data
        == raw
    )
