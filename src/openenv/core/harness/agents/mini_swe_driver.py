"""The long-lived mini-swe-agent process `MiniSweAgentAdapter` runs inside the sandbox.

It keeps one agent (and so one conversation) across turns. Protocol, one JSON object a line:
stdin `{"type": "message", "content": ...}` starts a turn; stdout carries `{"type": "ready"}`
once, then per turn `HarnessEvent`-shaped objects (`{"type": ..., "data": {...}}`) ending with
`turn_complete`. A turn ends when the model answers without a tool call (its text is the
response), when a command prints mini-swe-agent's submit marker (the rest of the output is the
response, and `done` is true), or at the per-turn step limit.

Everything else the libraries print goes to stderr: stdout is the event channel only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

#: The sandbox variable holding the API key the agent sends (the capture session id).
KEY_VARIABLE = "OPENENV_MODEL_API_KEY"
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

SYSTEM_PROMPT = """You are a helpful assistant that works on a computer through a bash tool.
Every command runs in a new subshell in {cwd}. When the user's request is done, answer in plain
text without a tool call; to finish the whole task, run `echo {marker}` on its own.
{tools}"""

TOOLS_PROMPT = """
The environment also offers these tools, which you call from bash as
`openenv-tool NAME '<JSON arguments>'` (`openenv-tool --list` describes them):
{listing}
"""


def _event_channel() -> IO[str]:
    """stdout for our events only; fd 1 (what print and logging reach) goes to stderr."""
    channel = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


class TurnDriver:
    """A mini-swe-agent conversation advanced one user message at a time."""

    def __init__(self, settings: dict[str, Any], emit: Any) -> None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")
        # mini-swe-agent retries a failed model call 10 times with waits up to a minute; the
        # capture proxy already reports upstream failures, so fail the turn sooner.
        os.environ["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] = str(settings.get("model_attempts", 3))
        from minisweagent.environments.local import LocalEnvironment
        from minisweagent.models.litellm_model import LitellmModel

        self.emit = emit
        self.cwd = settings["cwd"]
        self.step_limit = int(settings.get("step_limit", 30))
        api_key = os.environ.get(KEY_VARIABLE) or "unused"
        self.model = LitellmModel(
            model_name=f"openai/{settings['model']}",
            model_kwargs={
                "api_base": settings["model_url"].rstrip("/") + "/v1",
                "api_key": api_key,
                "drop_params": True,
            },
            cost_tracking="ignore_errors",
        )
        self.submitted: str | None = None
        driver = self

        class _Environment(LocalEnvironment):
            def _check_finished(self, output: dict[str, Any]) -> None:
                lines = output.get("output", "").lstrip().splitlines(keepends=True)
                if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
                    driver.submitted = "".join(lines[1:])

        self.environment = _Environment(
            cwd=self.cwd, timeout=int(settings.get("command_timeout_s", 60))
        )
        tools = settings.get("tools") or []
        listing = "\n".join(f"- {t['name']}: {t.get('description', '')}" for t in tools)
        system = SYSTEM_PROMPT.format(
            cwd=self.cwd,
            marker=SUBMIT_MARKER,
            tools=TOOLS_PROMPT.format(listing=listing) if tools else "",
        )
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system}]

    def _event(self, kind: str, **data: Any) -> None:
        self.emit({"type": kind, "data": data})

    def turn(self, message: str) -> None:
        from minisweagent.exceptions import FormatError

        self.messages.append({"role": "user", "content": message})
        self.submitted = None
        for _ in range(self.step_limit):
            self._event(
                "llm_request", messages=_plain(self.messages), model=self.model.config.model_name
            )
            try:
                reply = self.model.query(self.messages)
            except FormatError as exc:
                raw = exc.messages[0].get("extra", {}).get("response")
                choice = (raw or {}).get("choices", [{}])[0] if isinstance(raw, dict) else {}
                text = (choice.get("message") or {}).get("content") or ""
                if not (choice.get("message") or {}).get("tool_calls"):
                    # No tool call: the model answered the user, which ends the turn.
                    self.messages.append({"role": "assistant", "content": text})
                    self._event("llm_response", content=text, usage=(raw or {}).get("usage"))
                    self._event("turn_complete", response=text, done=False)
                    return
                self.messages.extend(exc.messages)
                self._event("error", message=str(exc.messages[0].get("content")), recoverable=True)
                continue
            response = reply.get("extra", {}).get("response", {})
            self.messages.append(reply)
            actions = reply.get("extra", {}).get("actions", [])
            self._event(
                "llm_response",
                content=reply.get("content") or "",
                usage=response.get("usage") if isinstance(response, dict) else None,
                tool_calls=[
                    {"name": "bash", "arguments": {"command": a["command"]}} for a in actions
                ],
            )
            outputs = []
            for action in actions:
                self._event("tool_call", tool_name="bash", arguments={"command": action["command"]})
                output = self.environment.execute(action)
                outputs.append(output)
                self._event(
                    "tool_result",
                    tool_name="bash",
                    result=output.get("output", ""),
                    error=output.get("exception_info") or None,
                    returncode=output.get("returncode"),
                )
            self.messages.extend(self.model.format_observation_messages(reply, outputs, {}))
            if self.submitted is not None:
                self._event("turn_complete", response=self.submitted, done=True)
                return
        self._event("error", message=f"no answer within {self.step_limit} steps", recoverable=True)
        self._event("turn_complete", response="", done=False)


def _plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as sent to the model (mini-swe-agent's bookkeeping left out)."""
    return [{k: v for k, v in m.items() if k != "extra"} for m in messages]


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
