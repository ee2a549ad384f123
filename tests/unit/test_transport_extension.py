"""The transport extension's calls when a server offers only part of it (or none)."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.connections import (
    ABORT_EXTENSION,
    abort_websocket,
    frames_waiting_probe,
    stop_reading,
)


class _Socket:
    """What these functions read of a Starlette WebSocket: its ASGI scope."""

    def __init__(self, extension: dict[str, Any] | None) -> None:
        self.scope = {"extensions": {ABORT_EXTENSION: extension} if extension is not None else {}}


def test_a_server_without_the_extension_is_left_alone() -> None:
    socket: Any = _Socket(None)
    assert abort_websocket(socket) is False
    assert stop_reading(socket) is False
    assert frames_waiting_probe(socket) is None


def test_a_partial_extension_does_what_it_offers() -> None:
    """An ASGI server (or a test harness) may offer the probe only: the flood guard's
    `stop_reading` then reports False rather than raising KeyError mid-connection."""
    calls: list[str] = []
    socket: Any = _Socket({"frames_waiting": lambda: False, "abort": lambda: calls.append("abort")})
    assert stop_reading(socket) is False
    assert abort_websocket(socket) is True and calls == ["abort"]
    probe = frames_waiting_probe(socket)
    assert probe is not None and probe() is False


def test_a_full_extension_is_called() -> None:
    calls: list[str] = []
    socket: Any = _Socket(
        {"abort": lambda: calls.append("abort"), "stop_reading": lambda: calls.append("stop")}
    )
    assert stop_reading(socket) is True and abort_websocket(socket) is True
    assert calls == ["stop", "abort"]
