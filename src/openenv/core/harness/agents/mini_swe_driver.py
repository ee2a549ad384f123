"""The long-lived mini-swe-agent process `MiniSweAgentAdapter` runs inside the sandbox.

It keeps one mini-swe-agent agent (`mini_swe_conversation.ConversationAgent`, mini-swe-agent's
own `DefaultAgent` on its `mini` config), and so one conversation, across turns. Protocol, one
JSON object a line: stdin `{"type": "message", "content": ...}` starts a turn; stdout carries
`{"type": "ready"}` once, then per turn `HarnessEvent`-shaped objects (`{"type": ..., "data":
{...}}`: llm_request, llm_response, tool_call, tool_result, error) ending with `turn_complete`
(`response`, `done`). A turn ends when the model answers without a tool call (its text is the
response), when a command prints mini-swe-agent's submit marker (the rest of the output is the
response, and `done` is true), at the per-turn step limit, or after mini-swe-agent's limit of
format errors in a row (both with an `error` event and an empty response). A failure of the
model or the library ends the process with a `fatal` line instead (the adapter raises).

Everything else the libraries print goes to stderr: stdout is the event channel only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

from openenv.settings import MODEL_API_KEY

#: The sandbox variable holding the API key the agent sends (the capture session id).
KEY_VARIABLE = MODEL_API_KEY.name
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _event_channel() -> IO[str]:
    """stdout for our events only; fd 1 (what print and logging reach) goes to stderr."""
    channel = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


class TurnDriver:
    """A mini-swe-agent conversation advanced one user message at a time."""

    def __init__(self, settings: dict[str, Any], emit: Any) -> None:
        os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")
        # mini-swe-agent retries a failed model call 10 times with waits up to a minute; the
        # capture proxy already reports upstream failures, so fail the turn sooner.
        os.environ["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] = str(settings.get("model_attempts", 3))
        from .mini_swe_conversation import build_agent

        self.emit = emit
        self.step_limit = int(settings.get("step_limit", 30))
        self.agent = build_agent(settings, self._event, MODEL_API_KEY.get() or "unused")

    def _event(self, kind: str, **data: Any) -> None:
        self.emit({"type": kind, "data": data})

    def turn(self, message: str) -> None:
        from .mini_swe_conversation import ANSWERED, SUBMITTED

        exit_message = self.agent.run_turn(message)
        extra = exit_message.get("extra", {})
        status = extra.get("exit_status", "")
        if status in (ANSWERED, SUBMITTED):
            response = str(extra.get("submission", ""))
            self._event("turn_complete", response=response, done=status == SUBMITTED)
            return
        if status in ("LimitsExceeded", "TimeExceeded"):
            reason = f"no answer within {self.step_limit} steps"
        elif status == "RepeatedFormatError":
            reason = f"{self.agent.n_consecutive_format_errors} format errors in a row"
        else:
            reason = f"the agent stopped: {status or exit_message.get('content')}"
        self._event("error", message=reason, recoverable=True, exit_status=status)
        self._event("turn_complete", response="", done=False)


def main() -> int:
    channel = _event_channel()

    def emit(event: dict[str, Any]) -> None:
        channel.write(json.dumps(event, default=str) + "\n")
        channel.flush()

    settings = json.loads(sys.argv[1])
    driver = TurnDriver(settings, emit)
    emit({"type": "ready"})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            frame = json.loads(line)
            content = str(frame["content"])
        except (ValueError, KeyError, TypeError) as exc:
            emit({"type": "error", "data": {"message": f"bad frame: {exc}", "recoverable": True}})
            continue
        try:
            driver.turn(content)
        except Exception as exc:  # the model or the library failed: the adapter raises
            emit({"type": "fatal", "data": {"message": f"{type(exc).__name__}: {exc}"}})
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
