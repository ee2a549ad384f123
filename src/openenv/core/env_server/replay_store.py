"""One session's outcomes by request id, so a re-sent request is answered, not applied again.

A transport that serves requests with ids (WebSocket `"id"`, HTTP `request_id`) asks the
session's store before running one, and hands it the outcome after:

    if replay.begin(request_id):  # new: now in flight
        try:
            reply = ...  # run the request, encode its reply
        except BaseException as exc:
            replay.finish(request_id, exc)
            raise
        replay.finish(request_id, reply)
    else:  # seen before: its stored outcome, or the one still running
        reply = await replay.outcome(request_id)

The last `window` ids are remembered, with as many of the newest replies as fit in `budget`
bytes (the newest always); a re-send whose reply was dropped gets REPLY_EVICTED (it is not
applied again).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any, Union

from ..errors import ReplyEvictedError, ServerError, exception_message
from ..protocol import EncodedReply, RequestId

#: What a request came to: its encoded reply, or the error it raised.
Outcome = Union[EncodedReply, ServerError]


def replayable(exc: BaseException) -> ServerError:
    """The error to store for a re-sent request: its code, message and data, without the
    traceback and causes (which would keep the failed call's frames alive)."""
    if isinstance(exc, ServerError):
        return ServerError(exc.message, exc.code, exc.to_data())
    return ServerError(f"Internal error: {exception_message(exc)}")


def outcome_size(outcome: Outcome) -> int:
    """The bytes an outcome is counted as against the budget."""
    if isinstance(outcome, EncodedReply):
        return 64 + len(outcome.payload) + sum(len(blob) for blob in outcome.blobs)
    return 256 + len(outcome.message) + sum(len(str(v)) for v in outcome.data.values())


class ReplayStore:
    """The outcomes of one session's requests by id (see the module's docstring)."""

    __slots__ = ("budget", "gauge", "inflight", "replies", "size", "window")

    def __init__(self, window: int, budget: int, gauge: Any = None) -> None:
        self.window = window
        self.budget = budget
        #: `openenv_replay_cache_bytes` (metrics on) while the session lives, else None.
        self.gauge = gauge
        #: An encoded reply, an error, or None once dropped for room (`size` bytes kept).
        self.replies: OrderedDict[RequestId, Outcome | None] = OrderedDict()
        self.size = 0
        #: Requests running, with what a duplicate of one waits for.
        self.inflight: dict[RequestId, asyncio.Future[Outcome]] = {}

    def begin(self, request_id: RequestId) -> bool:
        """True: the request is new and now in flight (`finish` it, however it ends). False: it
        was seen before; `await outcome(request_id)`."""
        if request_id in self.replies or request_id in self.inflight:
            return False
        self.inflight[request_id] = asyncio.get_running_loop().create_future()
        return True

    def finish(self, request_id: RequestId, outcome: EncodedReply | BaseException) -> None:
        """Store what a request begun came to: its reply, or the exception it raised (stored
        as its code and message). A `BaseException` that is no `Exception` (a cancellation)
        stores nothing: a duplicate waiting for it gives up too."""
        fut = self.inflight.pop(request_id, None)
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):
                if fut is not None:
                    fut.cancel()  # a waiting duplicate re-raises CancelledError and gives up
                return
            outcome = replayable(outcome)
        self._store(request_id, outcome)
        if fut is not None and not fut.done():
            fut.set_result(outcome)

    async def outcome(self, request_id: RequestId) -> EncodedReply:
        """The reply of a request seen before, or the error it raised (a fresh copy), waiting
        for it if it is still running; REPLY_EVICTED if its reply is no longer kept."""
        if request_id in self.replies:
            stored = self.replies[request_id]
            if stored is None:
                raise ReplyEvictedError(
                    f"Request {request_id!r} was applied, but its reply is no longer kept "
                    f"(at most {self.budget} bytes of replies per session); it is "
                    "not applied again and its outcome is unknown",
                    request_id=request_id,
                )
        else:
            stored = await asyncio.shield(self.inflight[request_id])
        if isinstance(stored, ServerError):
            raise replayable(stored)  # a fresh copy: raising the stored one would grow it
        return stored

    def cancel_waiters(self) -> None:
        """The session ended: duplicates waiting for a request still running give up."""
        for fut in self.inflight.values():
            if not fut.done():
                fut.cancel()

    def _store(self, request_id: RequestId, outcome: Outcome) -> None:
        """Keep `outcome`; drop the oldest replies past `budget` (their ids stay, so a re-send
        is refused rather than applied again) and the oldest ids past `window`."""
        replies = self.replies
        replies[request_id] = outcome
        size_before = self.size
        self.size += outcome_size(outcome)
        limit = self.budget
        if self.size > limit:
            for rid, old in replies.items():
                if self.size <= limit or rid == request_id:
                    break
                if old is not None:
                    self.size -= outcome_size(old)
                    replies[rid] = None
        while len(replies) > self.window:
            _, old = replies.popitem(last=False)
            if old is not None:
                self.size -= outcome_size(old)
        if self.gauge is not None and self.size != size_before:
            self.gauge.inc(self.size - size_before)
