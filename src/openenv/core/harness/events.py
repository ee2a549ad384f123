"""What a harness turn emits: typed events, the turn's response, and the `/harness` frames."""

from __future__ import annotations

import time
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class HarnessEventType(str, Enum):
    """Kinds of event; `data` keys by kind are listed on `HarnessEvent`."""

    LLM_REQUEST = "llm_request"
    LLM_RESPONSE = "llm_response"
    LLM_CHUNK = "llm_chunk"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    TEXT_OUTPUT = "text_output"
    ERROR = "error"
    TURN_COMPLETE = "turn_complete"


class HarnessEvent(BaseModel):
    """One thing that happened in a turn.

    Conventional `data` keys: llm_request `messages`, `model`; llm_response `content`, `usage`;
    llm_chunk `content`, `index`; tool_call `tool_name`, `arguments`; tool_result `tool_name`,
    `result`, `error`; text_output `text`; error `message`, `recoverable`; turn_complete
    `response` and optionally `done`.
    """

    type: HarnessEventType
    timestamp: float = Field(default_factory=time.time)
    data: dict[str, Any] = Field(default_factory=dict)


class HarnessResponse(BaseModel):
    """The outcome of one turn."""

    response: str
    events: list[HarnessEvent] = Field(default_factory=list)
    done: bool = False


class HarnessClientMessage(BaseModel):
    """A frame a client sends on the `/harness` WebSocket: one user message, one turn."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["message"] = "message"
    content: str


class HarnessProtocolError(BaseModel):
    """The reply to a `/harness` frame that is not a `HarnessClientMessage`."""

    type: Literal["protocol_error"] = "protocol_error"
    data: dict[str, Any] = Field(default_factory=dict)


def events_to_metadata(events: list[HarnessEvent]) -> list[dict[str, Any]]:
    """Events as JSON-safe dicts, for an observation's metadata."""
    return [event.model_dump(mode="json") for event in events]
