"""The wire protocol, defined once and free of I/O.

Servers (every transport) and clients both build and read frames here, so that a frame has one
shape and one error code one meaning. Nothing in this module opens a socket or imports a web
framework: it turns bytes into typed messages and back, like a sans-I/O protocol core, and the
transports around it own the I/O.

What is here, each defined once (every other module imports it from here, and
docs/protocol.md lists the same codes: tests/unit/test_protocol_docs.py fails on a drift):
- error codes, who is at fault for each (`ErrorCategory`) and its HTTP status, and the codes of
  the `/harness` socket's `protocol_error` frames (`HarnessErrorCode`);
- the WebSocket close codes the server sends (`CLOSE_CODES`);
- the WebSocket subprotocol that turns on the extensions (request ids, resume);
- where a session id travels on each transport;
- the message models (WebSocket envelopes, HTTP bodies) with OpenEnv's names;
- encoding and decoding of frames (`encode_frame`, `decode_request`, `decode_reply`), and the one
  encoder of every observation reply (`encode_observation`: WebSocket reset/step replies and the
  HTTP reset/step bodies alike) with its reader (`decode_observation`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, Union
from urllib.parse import parse_qsl, quote

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

# --- errors: codes, categories, statuses ---------------------------------------------------


class ErrorCategory(str, Enum):
    """Who is at fault, so that a trainer never scores an infrastructure failure as a reward."""

    CLIENT = "client"  # the request was malformed; fix the caller
    ENVIRONMENT = "environment"  # the environment's own code raised
    INFRASTRUCTURE = "infrastructure"  # capacity, lost sessions, timeouts, server faults


class WSErrorCode(str, Enum):
    """Error codes of error frames (OpenEnv's seven, then this project's additions)."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    FACTORY_ERROR = "FACTORY_ERROR"
    SESSION_ERROR = "SESSION_ERROR"
    # Additions. MESSAGE_TOO_LARGE replaces OpenEnv's connection drop on oversized frames;
    # the others narrow SESSION_ERROR / EXECUTION_ERROR where the cause is known.
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    SESSION_EXPIRED = "SESSION_EXPIRED"
    TIMEOUT = "TIMEOUT"
    REWARD_ERROR = "REWARD_ERROR"
    REPLY_EVICTED = "REPLY_EVICTED"


ErrorCode = WSErrorCode

_C, _E, _I = ErrorCategory.CLIENT, ErrorCategory.ENVIRONMENT, ErrorCategory.INFRASTRUCTURE
#: code -> (who is at fault, HTTP status)
_ERRORS: dict[WSErrorCode, tuple[ErrorCategory, int]] = {
    WSErrorCode.INVALID_JSON: (_C, 400),
    WSErrorCode.UNKNOWN_TYPE: (_C, 400),
    WSErrorCode.VALIDATION_ERROR: (_C, 422),
    WSErrorCode.MESSAGE_TOO_LARGE: (_C, 413),
    WSErrorCode.EXECUTION_ERROR: (_E, 500),
    WSErrorCode.FACTORY_ERROR: (_E, 500),
    WSErrorCode.REWARD_ERROR: (_E, 500),
    WSErrorCode.CAPACITY_REACHED: (_I, 503),
    WSErrorCode.SESSION_ERROR: (_I, 500),
    WSErrorCode.SESSION_NOT_FOUND: (_I, 404),
    WSErrorCode.SESSION_EXPIRED: (_I, 410),
    WSErrorCode.TIMEOUT: (_I, 504),
    # A re-sent request was applied, but its stored reply was dropped for room: the outcome is
    # unknown to the client, so the episode cannot be trusted (never re-applied).
    WSErrorCode.REPLY_EVICTED: (_I, 410),
}
ERROR_CATEGORY: dict[WSErrorCode, ErrorCategory] = {code: c for code, (c, _) in _ERRORS.items()}
HTTP_STATUS: dict[WSErrorCode, int] = {code: status for code, (_, status) in _ERRORS.items()}


class HarnessErrorCode(str, Enum):
    """Codes of the `/harness` socket's `protocol_error` frames (RFC 005's agent harness): the
    frame was refused and the connection stays usable."""

    INVALID_MESSAGE = "INVALID_MESSAGE"  # not a `{"type": "message", "content": ...}` frame
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"  # over `max_message_bytes`
    TOO_MANY_MESSAGES = "TOO_MANY_MESSAGES"  # too many messages queued while a turn runs


def error_category(code: str) -> ErrorCategory:
    """Who is at fault for `code`; an unknown code is the infrastructure's (never a reward)."""
    try:
        return ERROR_CATEGORY[WSErrorCode(code)]
    except ValueError:
        return ErrorCategory.INFRASTRUCTURE


def error_data(code: WSErrorCode | str, message: str, **extra: Any) -> dict[str, Any]:
    """The `data` of an error frame: OpenEnv's `message` and `code`, extras, and `category`."""
    code = WSErrorCode(code)
    data: dict[str, Any] = {"message": message, "code": code.value}
    data.update(extra)
    data["category"] = ERROR_CATEGORY[code].value
    return data


# --- WebSocket close codes ----------------------------------------------------------------
#
# The codes a server closes a WebSocket with (RFC 6455's, and the 4000s, for applications).
# Every other module imports them from here; none writes a close code as a number.

#: A normal end: the client closed the session, or a refused connection after its error frame.
CLOSE_NORMAL = 1000
#: "Going away": the server stopped without a SIGTERM drain (its lifespan ended).
CLOSE_SHUTDOWN = 1001
#: The connection broke the server's rules: a flood of invalid frames, or a refused Origin or
#: credentials (closed before the handshake completes, so the client sees HTTP 403).
CLOSE_POLICY = 1008
#: A worker process could not take a connection forwarded to it (multi-process servers).
CLOSE_INTERNAL_ERROR = 1011
#: Server shutting down (SIGTERM), "service restart": the session is gone with the server;
#: reconnect and start a new session (on another server) instead of resuming.
CLOSE_RESTART = 1012
#: The session was idle for more than `session_timeout` seconds; its slot is freed.
CLOSE_IDLE_TIMEOUT = 4001
#: Another connection resumed this connection's session.
CLOSE_TAKEN_OVER = 4002
#: Every close code above, with its name here.
CLOSE_CODES: Mapping[int, str] = MappingProxyType(
    {
        CLOSE_NORMAL: "CLOSE_NORMAL",
        CLOSE_SHUTDOWN: "CLOSE_SHUTDOWN",
        CLOSE_POLICY: "CLOSE_POLICY",
        CLOSE_INTERNAL_ERROR: "CLOSE_INTERNAL_ERROR",
        CLOSE_RESTART: "CLOSE_RESTART",
        CLOSE_IDLE_TIMEOUT: "CLOSE_IDLE_TIMEOUT",
        CLOSE_TAKEN_OVER: "CLOSE_TAKEN_OVER",
    }
)


# --- negotiation and session ids ------------------------------------------------------------

#: WebSocket subprotocol a client offers to say it speaks the extensions (ids, resume).
SUBPROTOCOL = "openenv.v1"
#: The extensions plus binary frames: replies whose data holds bytes or numpy arrays travel as
#: a binary frame with those values as raw attachments (`encode_payload`). A client that reads
#: them offers it before `SUBPROTOCOL`; a server picks the first it knows.
BINARY_SUBPROTOCOL = "openenv.v1.bin"
#: Every subprotocol that turns on the extensions, in the server's order of preference.
EXTENDED_SUBPROTOCOLS = (BINARY_SUBPROTOCOL, SUBPROTOCOL)
#: HTTP header naming an HTTP session; `NEW_SESSION` on /reset opens one.
SESSION_HEADER = "X-OpenEnv-Session-Id"
#: Query parameter naming a session (HTTP routes and `/ws?session_id=`).
SESSION_QUERY = "session_id"
#: The Streamable HTTP MCP transport's session header.
MCP_SESSION_HEADER = "Mcp-Session-Id"
#: Proves a reconnecting client is the one a WebSocket session was announced to: the id alone
#: names a session, the token (sent only to its connection) lets one resume it.
RESUME_TOKEN_HEADER = "X-OpenEnv-Resume-Token"
NEW_SESSION = "new"
#: Headers a session id may travel in, lower-cased as ASGI scopes carry them.
_SESSION_HEADERS_RAW = (SESSION_HEADER.lower().encode(), MCP_SESSION_HEADER.lower().encode())


def session_id_from_scope(scope: Mapping[str, Any]) -> str | None:
    """The session an HTTP or WebSocket request names (ASGI scope): one of the session
    headers, else `?session_id=`. Every transport and the worker router read it here."""
    for name, value in scope.get("headers", ()):
        if name in _SESSION_HEADERS_RAW and value:
            return bytes(value).decode("latin-1")
    query = scope.get("query_string", b"")
    if query:
        for key, value in parse_qsl(bytes(query).decode("latin-1")):
            if key == SESSION_QUERY and value:
                return value
    return None


def session_id_from_rpc(params: Any) -> str | None:
    """OpenEnv's JSON-RPC dialect names the session in `params.session_id`."""
    sid = params.get(SESSION_QUERY) if isinstance(params, dict) else None
    return None if sid is None or sid == "" else str(sid)


def session_log_id(session_id: str | None) -> str:
    """How a session appears in logs: a short digest, never the id itself (an id is enough to
    attach to a session, so logs must not carry it)."""
    if not session_id:
        return "-"
    return "s-" + hashlib.sha256(session_id.encode()).hexdigest()[:10]


_SESSION_IN_URL = re.compile(r"(session_id=|/sessions/)([^&\s/\"]+)")


def redact_session_ids(text: str) -> str:
    """`text` (a request line, a URL) with every session id replaced by its log id."""
    return _SESSION_IN_URL.sub(lambda m: m.group(1) + session_log_id(m.group(2)), text)


def ws_session_url(ws_url: str, session_id: str | None) -> str:
    """The `/ws` URL that attaches to (or resumes) `session_id`; a new session without one."""
    if not session_id:
        return ws_url
    return f"{ws_url}?{SESSION_QUERY}={quote(session_id, safe='')}"


# --- JSON ------------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        import base64

        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "tolist"):  # numpy scalars/arrays not covered by OPT_SERIALIZE_NUMPY
        return value.tolist()
    if hasattr(value, "model_dump"):
        return value.model_dump()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ORJSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> bytes:
    """JSON-encode anything an environment may put in an observation (numpy, enums, models)."""
    return orjson.dumps(value, default=_json_default, option=_ORJSON_OPTIONS)


def loads(data: str | bytes | bytearray | memoryview) -> Any:
    return orjson.loads(data)


# --- binary frames (extension) -------------------------------------------------------------------
#
# A binary frame is BINARY_MAGIC, the header's length (4 bytes, big-endian), the header (the
# frame's JSON with each bytes / numpy array value replaced by a placeholder
# `{"$blob": i, "size": n[, "dtype", "shape"]}`) and the attachments, in order, back to back.
# A JSON text never starts with a NUL byte, so the two kinds of frame cannot be confused.

BINARY_MAGIC = b"\x00OEB"
BLOB_KEY = "$blob"
_HEAD = len(BINARY_MAGIC) + 4


def _is_array(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return hasattr(value, "__array_interface__") and getattr(dtype, "hasobject", True) is False


def encode_payload(value: Any, binary: bool) -> tuple[bytes, tuple[bytes, ...]]:
    """`value` as JSON, and (with `binary`) its bytes and numpy array values taken out as
    attachments, in the order the JSON meets them. Without `binary`, or when `value` holds no
    such value, the JSON is `dumps(value)`'s: bytes as base64 text, arrays as nested lists."""
    if not binary:
        return dumps(value), ()
    blobs: list[bytes] = []

    def attach(item: Any) -> Any:
        if isinstance(item, (bytes, bytearray, memoryview)):
            blobs.append(bytes(item) if not isinstance(item, bytes) else item)
            return {BLOB_KEY: len(blobs) - 1, "size": len(blobs[-1])}
        if _is_array(item) and getattr(item, "ndim", 0) > 0:
            import numpy as np

            array = np.ascontiguousarray(item)
            blobs.append(array.tobytes())
            return {
                BLOB_KEY: len(blobs) - 1,
                "size": array.nbytes,
                "dtype": array.dtype.str,
                "shape": list(array.shape),
            }
        return _json_default(item)

    # Without OPT_SERIALIZE_NUMPY orjson hands arrays to `attach`; numpy scalars still become
    # plain numbers there (through `_json_default`).
    header = orjson.dumps(value, default=attach, option=orjson.OPT_NON_STR_KEYS)
    return header, tuple(blobs)


def pack_binary(header: bytes, blobs: tuple[bytes, ...]) -> bytes:
    """The binary frame of a header and its attachments."""
    return b"".join((BINARY_MAGIC, len(header).to_bytes(4, "big"), header, *blobs))


def is_binary_frame(raw: str | bytes) -> bool:
    return isinstance(raw, (bytes, bytearray, memoryview)) and bytes(raw[:4]) == BINARY_MAGIC


def unpack_binary(raw: bytes) -> Any:
    """The value of a binary frame, attachments back in place: bytes, or numpy arrays (of their
    dtype and shape, writable) where the sender had arrays. Malformed: ValueError."""
    view = memoryview(raw)
    if len(view) < _HEAD or bytes(view[:4]) != BINARY_MAGIC:
        raise ValueError("Not a binary frame")
    size = int.from_bytes(view[4:_HEAD], "big")
    if _HEAD + size > len(view):
        raise ValueError("Binary frame shorter than its header")
    value = loads(view[_HEAD : _HEAD + size])
    offsets: list[tuple[int, int]] = []
    position = _HEAD + size

    def restore(item: Any) -> Any:
        nonlocal position
        if isinstance(item, dict):
            index = item.get(BLOB_KEY)
            if type(index) is int and index == len(offsets) and type(item.get("size")) is int:
                start, position = position, position + item["size"]
                if position > len(view):
                    raise ValueError("Binary frame shorter than its attachments")
                offsets.append((start, position))
                if "dtype" not in item:
                    return bytes(view[start:position])
                import numpy as np

                array = np.frombuffer(bytearray(view[start:position]), dtype=item["dtype"])
                return array.reshape(item["shape"])
            for key, inner in item.items():
                if isinstance(inner, (dict, list)):
                    item[key] = restore(inner)
        elif isinstance(item, list):
            for i, inner in enumerate(item):
                if isinstance(inner, (dict, list)):
                    item[i] = restore(inner)
        return item

    try:
        value = restore(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"Malformed binary frame: {exc}") from None
    if position != len(view):
        raise ValueError("Binary frame has bytes no placeholder names")
    return value


# --- message models (OpenEnv's names) ---------------------------------------------------------

RequestId = Union[str, int]


class ResetRequest(BaseModel):
    """HTTP `/reset` body; extra keys are reset keyword arguments."""

    model_config = ConfigDict(extra="allow")

    seed: int | None = Field(default=None, ge=0)
    episode_id: str | None = Field(default=None, max_length=255)


class StepRequest(BaseModel):
    """HTTP `/step` body; `request_id` makes a step in a session idempotent."""

    model_config = ConfigDict(extra="allow")

    action: dict[str, Any]
    timeout_s: float | None = Field(default=None, gt=0)
    request_id: str | None = Field(default=None, max_length=255)


class StepOptions(BaseModel):
    """The keyword arguments of a WebSocket step (`options`), checked as HTTP `/step` checks
    the same fields, so a malformed one is the client's error on every transport."""

    model_config = ConfigDict(extra="allow")

    timeout_s: float | None = Field(default=None, gt=0)


class ResetResponse(BaseModel):
    """HTTP reset/step reply (`metadata` and `session_id` are additions)."""

    model_config = ConfigDict(extra="allow")

    observation: dict[str, Any]
    reward: bool | int | float | None = None
    done: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)


StepResponse = ResetResponse


# The envelope models are built on first use (`defer_build`): a client that never meets an
# unusual frame never pays for building them at import. (The HTTP bodies above are built at
# once: FastAPI's schema generation warns about deferred body models.)


class _WSMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    id: RequestId | None = None


class WSResetMessage(_WSMessage):
    type: Literal["reset"] = "reset"
    data: dict[str, Any] = Field(default_factory=dict)


class WSStepMessage(_WSMessage):
    type: Literal["step"] = "step"
    data: dict[str, Any]
    #: Extension: keyword arguments of the environment's step (e.g. `timeout_s`).
    options: dict[str, Any] | None = None


class WSStateMessage(_WSMessage):
    type: Literal["state"] = "state"


class WSCloseMessage(_WSMessage):
    type: Literal["close"] = "close"


class WSMCPMessage(_WSMessage):
    type: Literal["mcp"] = "mcp"
    data: dict[str, Any]


WSIncomingMessage = Union[
    WSResetMessage, WSStepMessage, WSStateMessage, WSCloseMessage, WSMCPMessage
]


class _WSReply(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    id: RequestId | None = None


class WSObservationResponse(_WSReply):
    type: Literal["observation"] = "observation"
    data: dict[str, Any]


class WSStateResponse(_WSReply):
    type: Literal["state"] = "state"
    data: dict[str, Any]


class WSErrorResponse(_WSReply):
    type: Literal["error"] = "error"
    data: dict[str, Any]


class WSMCPResponse(_WSReply):
    type: Literal["mcp"] = "mcp"
    data: dict[str, Any]


class WSSessionResponse(_WSReply):
    """Extension: names the session (and whether it was resumed) after the handshake."""

    type: Literal["session"] = "session"
    data: dict[str, Any]


class WSClosedResponse(_WSReply):
    """Extension: confirms a `close` that carried an id."""

    type: Literal["closed"] = "closed"
    data: dict[str, Any] = Field(default_factory=dict)


REQUEST_MODELS: dict[str, type[_WSMessage]] = {
    "reset": WSResetMessage,
    "step": WSStepMessage,
    "state": WSStateMessage,
    "close": WSCloseMessage,
    "mcp": WSMCPMessage,
}
REPLY_MODELS: dict[str, type[_WSReply]] = {
    "observation": WSObservationResponse,
    "state": WSStateResponse,
    "error": WSErrorResponse,
    "mcp": WSMCPResponse,
    "session": WSSessionResponse,
    "closed": WSClosedResponse,
}
RequestKind = Literal["reset", "step", "state", "close", "mcp"]


# --- frames ------------------------------------------------------------------------------------


def encode_frame(kind: str, data: Any, request_id: RequestId | None = None) -> bytes:
    """A frame `{"type", "data"[, "id"]}` as JSON bytes; the id only when there is one."""
    msg: dict[str, Any] = {"type": kind, "data": data}
    if request_id is not None:
        msg["id"] = request_id
    return dumps(msg)


#: The bytes before a reply's data, by reply type: `{"type":"<type>","data":`.
_FRAME_HEADS: dict[str, bytes] = {
    kind: b'{"type":' + dumps(kind) + b',"data":' for kind in REPLY_MODELS
}
_FRAME_ID = b',"id":'
#: The key of an HTTP session's id in HTTP reset/step bodies (an extension).
SESSION_ID_FIELD = "session_id"


class EncodedReply(NamedTuple):
    """A reply encoded once, without what differs per transport (the WebSocket envelope and
    request id, HTTP's session id). Sessions keep these for re-sent requests, measured in bytes,
    and any transport answers a re-send from one."""

    kind: str  # the WebSocket reply type: "observation", "state" or "mcp"
    payload: bytes  # the JSON of the reply's data (an object)
    #: attachments of a binary frame (`encode_payload`), named by placeholders in `payload`
    blobs: tuple[bytes, ...] = ()

    def frame(self, request_id: RequestId | None = None, binary: bool = True) -> bytes:
        """The WebSocket frame, byte for byte what `encode_frame` makes of the same reply
        (a binary frame when there are attachments, unless the connection did not negotiate
        binary frames: a reply kept from a binary connection, re-sent to a resumed one that
        speaks JSON only, gets its attachments back inline)."""
        kind, payload, blobs = self
        if blobs and not binary:
            payload = dumps(unpack_binary(pack_binary(payload, blobs)))
        head = _FRAME_HEADS.get(kind) or b'{"type":' + dumps(kind) + b',"data":'
        if request_id is None:
            text = b"".join((head, payload, b"}"))
        elif type(request_id) is int:  # (JSON's integer is its decimal text: no encoder call)
            text = b"".join((head, payload, b',"id":%d}' % request_id))
        else:
            text = b"".join((head, payload, _FRAME_ID, dumps(request_id), b"}"))
        return pack_binary(text, blobs) if blobs and binary else text

    def body(self, session_id: str | None = None) -> bytes:
        """The HTTP body of the reply: its data, with an HTTP session's id as its last key
        (`session_id`) when there is one; always JSON (attachments back inline)."""
        if session_id is not None:
            return self.with_field(SESSION_ID_FIELD, session_id)
        if self.blobs:
            return dumps(unpack_binary(pack_binary(self.payload, self.blobs)))
        return self.payload

    def with_field(self, name: str, value: Any) -> bytes:
        """The payload with one more key at its end (as if added to the dict before encoding);
        always JSON (attachments, if any, back inline as base64 text or lists)."""
        extra = dumps(name) + b":" + dumps(value) + b"}"
        payload = self.payload
        if self.blobs:  # stored for a binary WebSocket, asked for by a JSON-only transport
            payload = dumps(unpack_binary(pack_binary(payload, self.blobs)))
        body = payload.rstrip()
        return body[:-1] + (extra if body.endswith(b"{}") else b"," + extra)


#: Observation fields that travel beside the observation, not inside it.
_OBSERVATION_ENVELOPE = {"reward", "done"}
_PYDANTIC_DUMP = BaseModel.model_dump
#: `EncodedReply(...)` without its Python-level constructor, and orjson without `dumps`'s call
#: (each runs once per step).
_new_reply = tuple.__new__
_orjson_dumps = orjson.dumps


def observation_data(observation: BaseModel) -> dict[str, Any]:
    """The data of an observation reply (an `Observation`, or any model with `reward`, `done`
    and `metadata`): OpenEnv's `{"observation", "reward", "done"}` plus the metadata.

    Metadata sits both inside the observation (where OpenEnv 0.10 clients read it) and at the
    top level. The reward keeps its own JSON type (bool, int or float) on every transport.
    """
    cls = type(observation)
    if cls.model_dump is _PYDANTIC_DUMP:
        # What `model_dump` does, without passing the serializer a dozen default keyword
        # arguments: that costs a third of the dump, on every step. A class that overrides
        # `model_dump` gets its own.
        body = cls.__pydantic_serializer__.to_python(observation, exclude=_OBSERVATION_ENVELOPE)
    else:
        body = observation.model_dump(exclude=_OBSERVATION_ENVELOPE)
    return {
        "observation": body,
        "reward": observation.reward,  # type: ignore[attr-defined]
        "done": observation.done,  # type: ignore[attr-defined]
        "metadata": observation.metadata,  # type: ignore[attr-defined]
    }


def encode_observation(observation: BaseModel, binary: bool = False) -> EncodedReply:
    """Every reset and step reply, on every transport, encoded once: the WebSocket frame is
    `.frame(request_id, binary)`, the HTTP body `.body(session_id)`, and a session keeps the
    reply itself for a re-sent request. With `binary` (the connection negotiated binary frames)
    the observation's bytes and arrays are attachments (`encode_payload`).

    A value JSON cannot hold raises TypeError (the server reports it as the environment's
    EXECUTION_ERROR)."""
    data = observation_data(observation)
    if binary:
        payload, blobs = encode_payload(data, True)
    else:  # `dumps`, inline: this runs for every step
        payload, blobs = _orjson_dumps(data, default=_json_default, option=_ORJSON_OPTIONS), ()
    return _new_reply(EncodedReply, ("observation", payload, blobs))


def encode_state(state: dict[str, Any]) -> EncodedReply:
    """The reply to a `state` request (`state` is the State's `model_dump()`)."""
    return EncodedReply("state", dumps(state))


def encode_mcp(result: Any) -> EncodedReply:
    """The reply to an `mcp` request: its JSON-RPC response."""
    return EncodedReply("mcp", dumps(result))


def encode_session(
    session_id: str,
    *,
    resumed: bool,
    resume_grace_s: float,
    session_timeout_s: float | None,
    step_count: int,
    resume_token: str | None,
) -> bytes:
    """The extension's `session` frame, the server's first frame on an extended connection."""
    data = {
        "session_id": session_id,
        "resumed": resumed,
        "resume_grace_s": resume_grace_s,
        "session_timeout_s": session_timeout_s,
        "step_count": step_count,
        "resume_token": resume_token,
    }
    return encode_frame("session", data)


def encode_closed(request_id: RequestId) -> bytes:
    """The extension's acknowledgement of a `close` request that carried an id."""
    return encode_frame("closed", {}, request_id)


class ObservationReply(NamedTuple):
    """An observation reply's data, read as OpenEnv 0.10's clients read it (client side)."""

    observation: dict[str, Any]  # the observation's own fields (without its metadata)
    reward: bool | int | float | None
    done: bool
    metadata: dict[str, Any]  # the top-level metadata, else the observation's own


def decode_observation(data: Mapping[str, Any]) -> ObservationReply:
    """The parts of an observation reply's data (a decoded `observation` frame's `data`, or an
    HTTP reset/step body); ValueError when it is not one."""
    body = data.get("observation")
    if not isinstance(body, dict):
        raise ValueError(f"Not an observation reply (keys: {sorted(map(str, data))[:8]})")
    fields = dict(body)
    inner = fields.pop("metadata", None)
    metadata = data.get("metadata") or inner or {}
    return ObservationReply(fields, data.get("reward"), bool(data.get("done", False)), metadata)


def encode_request(
    kind: RequestKind,
    data: Any = None,
    request_id: RequestId | None = None,
    options: dict[str, Any] | None = None,
) -> str:
    """A client's request frame as text; `state` and `close` carry no data."""
    msg: dict[str, Any] = {"type": kind}
    if data is not None and kind not in ("state", "close"):
        msg["data"] = data
    if request_id is not None:
        msg["id"] = request_id
    if options:
        msg["options"] = options
    return dumps(msg).decode()


def encode_error(
    code: WSErrorCode | str, message: str, request_id: RequestId | None = None, **extra: Any
) -> bytes:
    return encode_error_data(error_data(code, message, **extra), request_id)


def encode_error_data(data: dict[str, Any], request_id: RequestId | None = None) -> bytes:
    """An error frame of a ready `data` (`error_data`'s shape, e.g. `ServerError.to_data()`)."""
    return encode_frame("error", data, request_id)


#: How much of an offending input a validation error echoes back: a client that sends a huge
#: or deeply nested value gets a short excerpt of it, never an error too big or too deep to send.
ERROR_INPUT_DEPTH = 6
ERROR_INPUT_ITEMS = 16
ERROR_INPUT_CHARS = 200
#: Field errors listed in one reply, at most (a client needs the first ones to fix its input).
MAX_FIELD_ERRORS = 32
_INT64 = 2**63


def error_excerpt(value: Any, depth: int = 0) -> Any:
    """A JSON-safe excerpt of `value` for an error reply: containers cut to
    `ERROR_INPUT_ITEMS` entries and `ERROR_INPUT_DEPTH` levels, strings to `ERROR_INPUT_CHARS`,
    anything else (bytes, exceptions, objects) to its truncated text."""
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else _cut(str(value))
    if isinstance(value, str):
        return _cut(value)
    if isinstance(value, (dict, list, tuple)):
        if depth >= ERROR_INPUT_DEPTH:
            return "..."
        if isinstance(value, dict):
            items = list(value.items())
            out: Any = {
                _cut(str(k)): error_excerpt(v, depth + 1) for k, v in items[:ERROR_INPUT_ITEMS]
            }
            if len(items) > ERROR_INPUT_ITEMS:
                out["..."] = f"{len(items) - ERROR_INPUT_ITEMS} more"
            return out
        out = [error_excerpt(v, depth + 1) for v in value[:ERROR_INPUT_ITEMS]]
        if len(value) > ERROR_INPUT_ITEMS:
            out.append(f"... {len(value) - ERROR_INPUT_ITEMS} more")
        return out
    return _cut(str(value))


def _cut(text: str) -> str:
    return text if len(text) <= ERROR_INPUT_CHARS else text[:ERROR_INPUT_CHARS] + "..."


def field_errors(errors: Any) -> list[dict[str, Any]]:
    """Field errors (pydantic's `errors()` dicts) as JSON-safe dicts (`type`, `loc`, `msg`,
    `input`, `ctx`), with inputs and contexts cut to excerpts (see `error_excerpt`)."""
    out: list[dict[str, Any]] = []
    for err in list(errors)[:MAX_FIELD_ERRORS]:
        item: dict[str, Any] = {
            "type": str(err.get("type", "")),
            "loc": [p if isinstance(p, int) else _cut(str(p)) for p in err.get("loc", ())],
            "msg": _cut(str(err.get("msg", ""))),
        }
        if "input" in err:
            item["input"] = error_excerpt(err["input"])
        ctx = err.get("ctx")
        if ctx:
            item["ctx"] = {str(k): error_excerpt(v, ERROR_INPUT_DEPTH - 1) for k, v in ctx.items()}
        out.append(item)
    return out


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors as JSON-safe dicts (`loc`, `msg`, `type`, ...), inputs excerpted."""
    return field_errors(exc.errors(include_url=False))


def describe_validation(exc: ValidationError, what: str) -> str:
    """One line naming the offending fields, for people reading an error."""
    parts = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False)[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(_cut(f"{loc}: {err.get('msg')}"))
    return f"Invalid {what}: " + "; ".join(parts)


def invalid_data(exc: ValidationError, what: str) -> dict[str, Any]:
    """OpenEnv's VALIDATION_ERROR data, plus `errors` and a `detail` that names the fields."""
    return error_data(
        WSErrorCode.VALIDATION_ERROR,
        "Invalid message",
        errors=validation_errors(exc),
        detail=describe_validation(exc, what),
    )


class Request(NamedTuple):
    """A decoded client frame: its kind, data (a dict, or None for state/close), id and, for
    a step, the keyword arguments of the environment's step (`options`). A tuple, because one
    is made per frame on the hot path."""

    kind: RequestKind
    data: dict[str, Any] | None
    id: RequestId | None
    options: dict[str, Any] | None = None


@dataclass(frozen=True)
class Rejected:
    """A client frame the protocol refuses; `frame` is the error reply to send."""

    frame: bytes


_STEP_KEYS = frozenset({"type", "data", "id"})
#: Longest request id (characters): ids are short tokens, kept per session for replies.
MAX_REQUEST_ID_CHARS = 255


def decode_request(raw: str | bytes) -> Request | Rejected:
    """Parse and validate one client frame (server side).

    JSON is read strictly (no NaN or Infinity, at most 1024 levels deep); reset arguments
    and step options are checked like the HTTP bodies, so a malformed one is a client error.
    """
    try:
        msg = loads(raw)
    except ValueError as exc:
        return Rejected(encode_error(WSErrorCode.INVALID_JSON, f"Invalid JSON: {exc}"))
    if not isinstance(msg, dict):
        return Rejected(
            encode_error(WSErrorCode.VALIDATION_ERROR, "Invalid message: expected a JSON object")
        )
    request_id = msg.get("id")
    if type(request_id) is str and len(request_id) > MAX_REQUEST_ID_CHARS:
        return Rejected(
            encode_error(
                WSErrorCode.VALIDATION_ERROR,
                f"Invalid message: id longer than {MAX_REQUEST_ID_CHARS} characters",
            )
        )
    kind = msg.get("type")
    model = REQUEST_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        return Rejected(
            encode_error(WSErrorCode.UNKNOWN_TYPE, f"Unknown message type: {kind}", request_id)
        )
    data = msg.get("data")
    # The common frame, a step with a dict and a plain id, is what the model accepts as it is.
    plain_step = (
        kind == "step"
        and type(data) is dict
        and (request_id is None or type(request_id) in (str, int))
        and _STEP_KEYS.issuperset(msg)
    )
    if not plain_step:
        try:
            model.model_validate(msg)
        except ValidationError as exc:
            return Rejected(encode_error_data(invalid_data(exc, "message"), request_id))
        options = msg.get("options")
        try:
            if kind == "reset":
                data = ResetRequest.model_validate(data or {}).model_dump(exclude_unset=True)
            elif options:
                options = StepOptions.model_validate(options).model_dump(exclude_unset=True)
        except ValidationError as exc:
            what = "reset arguments" if kind == "reset" else "step options"
            return Rejected(encode_error_data(invalid_data(exc, what), request_id))
        return Request(kind, data, request_id, options)  # type: ignore[arg-type]
    return Request(kind, data, request_id)  # type: ignore[arg-type]


class Reply(NamedTuple):
    """A decoded server frame (client side)."""

    kind: str
    data: dict[str, Any]
    id: RequestId | None

    @property
    def is_error(self) -> bool:
        return self.kind == "error"


_REPLY_KEYS = frozenset({"type", "data", "id"})


def decode_reply(raw: str | bytes) -> Reply:
    """Parse one server frame (client side); anything else raises ValueError."""
    msg = unpack_binary(raw) if is_binary_frame(raw) else loads(raw)  # type: ignore[arg-type]
    kind = msg.get("type") if isinstance(msg, dict) else None
    model = REPLY_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ValueError(f"Not a server frame: {_excerpt(raw)}")
    data, request_id = msg.get("data"), msg.get("id")
    if not (
        type(data) is dict
        and (request_id is None or type(request_id) in (str, int))
        and _REPLY_KEYS.issuperset(msg)
    ):  # the common frame skips the model; anything else must pass it
        try:
            frame = model.model_validate(msg)
        except ValidationError as exc:
            raise ValueError(
                f"Malformed {kind!r} frame: {describe_validation(exc, 'frame')}"
            ) from exc
        data, request_id = frame.model_dump().get("data", {}), frame.id
    return Reply(kind, data, request_id)  # type: ignore[arg-type]


def _excerpt(raw: str | bytes) -> str:
    text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
    return repr(text[:200])
