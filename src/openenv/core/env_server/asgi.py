"""Small ASGI helpers shared by the middlewares."""

from __future__ import annotations

from typing import Any, Optional

from starlette.types import Receive


class BodyTooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


async def read_body(receive: Receive, limit: Optional[int] = None) -> Optional[bytes]:
    """The whole request body; None if the client left; BodyTooLarge past `limit` bytes."""
    chunks: list[bytes] = []
    received = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        received += len(chunk)
        if limit is not None and received > limit:
            raise BodyTooLarge(received)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that yields an already-read body once, then defers to the real one."""
    sent = False

    async def replayed() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
