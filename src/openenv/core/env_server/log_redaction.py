"""Keep session ids out of server logs.

A session id is enough to attach to a session, so it is a credential: uvicorn's access log and
its WebSocket lines print request paths with `?session_id=...` and `/sessions/<id>`. A filter on
those loggers replaces every id with a short digest (`protocol.session_log_id`), which still
lets one line be matched with another.
"""

from __future__ import annotations

import logging

from ..protocol import redact_session_ids

_LOGGERS = ("uvicorn.access", "uvicorn.error")


class SessionIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(
                redact_session_ids(arg) if isinstance(arg, str) else arg for arg in record.args
            )
        elif isinstance(record.msg, str) and not record.args:
            record.msg = redact_session_ids(record.msg)
        return True


_FILTER = SessionIdFilter()


def install() -> None:
    """Idempotent; called when an app is built, so every way of serving it is covered."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
