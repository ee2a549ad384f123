"""The wire protocol, defined once and free of I/O.

Servers (every transport) and clients both build and read frames here, so that a frame has one
shape and one error code one meaning. Nothing in this module opens a socket or imports a web
framework: it turns bytes into typed messages and back, like a sans-I/O protocol core, and the
transports around it own the I/O.

What is here:
- error codes, who is at fault for each (`ErrorCategory`) and its HTTP status;
- the WebSocket subprotocol that turns on the extensions (request ids, resume);
- where a session id travels on each transport;
- the message models (WebSocket envelopes, HTTP bodies) with OpenEnv's names;
- encoding and decoding of frames (`encode_frame`, `decode_request`, `decode_reply`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
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
        payload = self.payload
        if self.blobs and not binary:
            payload = dumps(unpack_binary(pack_binary(payload, self.blobs)))
        head = b'{"type":' + dumps(self.kind) + b',"data":' + payload
        if request_id is None:
            text = head + b"}"
        else:
            text = head + b',"id":' + dumps(request_id) + b"}"
        return pack_binary(text, self.blobs) if self.blobs and binary else text

    def with_field(self, name: str, value: Any) -> bytes:
        """The payload with one more key at its end (as if added to the dict before encoding);
        always JSON (attachments, if any, back inline as base64 text or lists)."""
        extra = dumps(name) + b":" + dumps(value) + b"}"
        payload = self.payload
        if self.blobs:  # stored for a binary WebSocket, asked for by a JSON-only transport
            payload = dumps(unpack_binary(pack_binary(payload, self.blobs)))
        body = payload.rstrip()
        return body[:-1] + (extra if body.endswith(b"{}") else b"," + extra)


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
    return encode_frame("error", error_data(code, message, **extra), request_id)


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
            return Rejected(encode_frame("error", invalid_data(exc, "message"), request_id))
        options = msg.get("options")
        try:
            if kind == "reset":
                data = ResetRequest.model_validate(data or {}).model_dump(exclude_unset=True)
            elif options:
                options = StepOptions.model_validate(options).model_dump(exclude_unset=True)
        except ValidationError as exc:
            what = "reset arguments" if kind == "reset" else "step options"
            return Rejected(encode_frame("error", invalid_data(exc, what), request_id))
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
