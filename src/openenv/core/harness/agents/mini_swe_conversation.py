"""mini-swe-agent's own agent, kept across the turns of a conversation (`mini_swe_driver`'s).

`ConversationAgent` is mini-swe-agent's `DefaultAgent`, with mini-swe-agent's `mini` config
(the tool-calling one its `mini` command uses: system and instance templates, observation and
format-error templates, environment variables), its `LitellmModel` and its `LocalEnvironment`.
`DefaultAgent.run` starts a task afresh; `run_turn` continues the kept conversation instead,
the way mini-swe-agent's interactive agent takes a new task from the user after one finished:
it adds the user's message (the first one through the instance template, after the system
message) and runs the same step loop as `run` until an exit. mini-swe-agent's exits are kept
(`Submitted` by `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, `LimitsExceeded` at the turn's
step limit, `RepeatedFormatError`); one is added: a reply with text and no tool call is the
model's answer to the user (`Answered`), which ends the turn. Format errors (bad tool calls,
empty or cut-off replies) go back to the model as mini-swe-agent sends them.

Importing mini-swe-agent prints, so only the driver imports this module, once its stdout is the
event channel.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from minisweagent.agents.default import DefaultAgent
from minisweagent.config import get_config_from_spec
from minisweagent.environments.local import LocalEnvironment
from minisweagent.exceptions import FormatError, InterruptAgentFlow, Submitted
from minisweagent.models.litellm_model import LitellmModel

#: `emit(kind, **data)`: one event of the driver's protocol.
Emit = Callable[..., None]

#: mini-swe-agent's configuration we start from (its `mini` command's default).
CONFIG = "mini.yaml"

#: Exit statuses (`extra["exit_status"]` of the exit message that ends a turn).
ANSWERED = "Answered"
SUBMITTED = "Submitted"

#: Added to the config's system template: how a turn ends, and the environment's tools.
CONVERSATION_TEMPLATE = """

You work with a user in {{cwd}}, over several messages. Every response calls the bash tool,
except your reply to the user: when you have done what the user's latest message asks (or need
to ask the user something), reply in plain text without a tool call. That ends your turn, and
the user may write again. To finish the whole task, run `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`
on its own.
{%- if openenv_tools %}

The environment also offers these tools, which you call from bash as
`openenv-tool NAME '<JSON arguments>'` (`openenv-tool --list` describes them and their arguments):
{% for tool in openenv_tools %}
- {{ tool.name }}: {{ tool.description }}
{%- endfor %}
{%- endif %}
"""


class Answered(InterruptAgentFlow):
    """The model replied to the user without a tool call: the turn is over."""


class EventModel(LitellmModel):
    """mini-swe-agent's `LitellmModel`, reporting each call as `llm_request`/`llm_response`.

    A reply with text and no tool call parses to no actions (the agent takes it as the answer);
    an empty reply, or one cut off at the token limit, stays mini-swe-agent's format error.
    """

    def __init__(self, *, emit: Emit, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.emit = emit

    def query(self, messages: list[dict[str, str]], **kwargs: Any) -> dict:
        self.emit(
            "llm_request",
            messages=self._prepare_messages_for_api(messages),
            model=self.config.model_name,
        )
        try:
            message = super().query(messages, **kwargs)
        except FormatError as exc:
            self._response_event(exc.messages[0].get("extra", {}).get("response"))
            raise
        self._response_event(message.get("extra", {}).get("response"))
        return message

    def _parse_actions(self, response: Any) -> list[dict]:
        choice = response.choices[0]
        content = choice.message.content
        if (
            not choice.message.tool_calls
            and isinstance(content, str)
            and content.strip()
            and choice.finish_reason != "length"
        ):
            return []
        return super()._parse_actions(response)

    def _response_event(self, response: Any) -> None:
        data = response if isinstance(response, dict) else {}
        choice = (data.get("choices") or [{}])[0] or {}
        message = choice.get("message") or {}
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    pass
            calls.append({"name": function.get("name"), "arguments": arguments})
        self.emit(
            "llm_response",
            content=message.get("content") or "",
            usage=data.get("usage"),
            tool_calls=calls,
            finish_reason=choice.get("finish_reason"),
        )


class TurnEnvironment(LocalEnvironment):
    """mini-swe-agent's `LocalEnvironment`, keeping the output of a command that submitted
    (its `Submitted` carries only what follows the marker)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.last_output: dict[str, Any] = {}

    def _check_finished(self, output: dict) -> None:
        self.last_output = output
        super()._check_finished(output)


class ConversationAgent(DefaultAgent):
    """mini-swe-agent's `DefaultAgent`, one conversation across turns (see the module
    docstring). `turn_step_limit` bounds the model calls of one turn (0: none)."""

    env: TurnEnvironment

    def __init__(
        self,
        model: EventModel,
        env: TurnEnvironment,
        *,
        emit: Emit,
        turn_step_limit: int,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, env, **kwargs)
        self.emit = emit
        self.turn_step_limit = turn_step_limit

    def run_turn(self, message: str) -> dict:
        """Add the user's message and step until the turn's exit; return that exit message
        (left out of the kept conversation: it is bookkeeping, not something the model said)."""
        if not self.messages:
            self.extra_template_vars |= {"task": message}
            self.add_messages(
                self.model.format_message(
                    role="system", content=self._render_template(self.config.system_template)
                ),
                self.model.format_message(
                    role="user", content=self._render_template(self.config.instance_template)
                ),
            )
        else:
            self.add_messages(self.model.format_message(role="user", content=message))
        self.config.step_limit = self.n_calls + self.turn_step_limit if self.turn_step_limit else 0
        self.n_consecutive_format_errors = 0
        # DefaultAgent.run's loop, on the kept messages.
        while True:
            try:
                self.step()
                self.n_consecutive_format_errors = 0
            except FormatError as e:
                self.cost += e.messages[0].get("extra", {}).get("cost", 0.0)
                self.n_consecutive_format_errors += 1
                self.emit("error", message=str(e.messages[0].get("content")), recoverable=True)
                self.add_messages(*e.messages)
                limit = self.config.max_consecutive_format_errors
                if 0 < limit <= self.n_consecutive_format_errors:
                    self.add_messages(
                        {
                            "role": "exit",
                            "content": "RepeatedFormatError",
                            "extra": {"exit_status": "RepeatedFormatError", "submission": ""},
                        }
                    )
            except InterruptAgentFlow as e:
                self.add_messages(*e.messages)
            except Exception as e:
                self.handle_uncaught_exception(e)
                raise
            finally:
                self.save(self.config.output_path)
            if self.messages[-1].get("role") == "exit":
                return self.messages.pop()

    def execute_actions(self, message: dict) -> list[dict]:
        """Run the reply's commands (reporting each), and add their observations even when one
        submitted, so the conversation can go on; no command means the reply is the answer."""
        actions = message.get("extra", {}).get("actions", [])
        if not actions:
            answer = message.get("content") or ""
            raise Answered(
                {
                    "role": "exit",
                    "content": answer,
                    "extra": {"exit_status": ANSWERED, "submission": answer},
                }
            )
        outputs: list[dict] = []
        try:
            for action in actions:
                self.emit("tool_call", tool_name="bash", arguments={"command": action["command"]})
                try:
                    output = self.env.execute(action)
                except Submitted:
                    self._tool_result(self.env.last_output)
                    outputs.append(self.env.last_output)
                    raise
                self._tool_result(output)
                outputs.append(output)
        finally:
            observations = self.add_messages(
                *self.model.format_observation_messages(message, outputs, self.get_template_vars())
            )
        return observations

    def _tool_result(self, output: dict) -> None:
        self.emit(
            "tool_result",
            tool_name="bash",
            result=output.get("output", ""),
            error=output.get("exception_info") or None,
            returncode=output.get("returncode"),
        )


def build_agent(settings: dict[str, Any], emit: Emit, api_key: str) -> ConversationAgent:
    """The agent for the driver's settings, on mini-swe-agent's `mini` config."""
    config = get_config_from_spec(CONFIG)
    agent_config = config.get("agent", {})
    model_config = config.get("model", {})
    model = EventModel(
        emit=emit,
        model_name=f"openai/{settings['model']}",
        model_kwargs={
            **model_config.get("model_kwargs", {}),
            "api_base": settings["model_url"].rstrip("/") + "/v1",
            "api_key": api_key,
            "drop_params": True,
        },
        cost_tracking="ignore_errors",
        **{
            key: model_config[key]
            for key in ("observation_template", "format_error_template")
            if key in model_config
        },
    )
    env = TurnEnvironment(
        cwd=settings["cwd"],
        env=config.get("environment", {}).get("env", {}),
        timeout=int(settings.get("command_timeout_s", 60)),
    )
    agent = ConversationAgent(
        model,
        env,
        emit=emit,
        turn_step_limit=int(settings.get("step_limit", 30)),
        system_template=agent_config["system_template"].rstrip("\n") + CONVERSATION_TEMPLATE,
        instance_template=agent_config["instance_template"],
        # The trainer bounds an episode (turns, steps, time); cost is not ours to cap.
        cost_limit=0,
    )
    agent.extra_template_vars["openenv_tools"] = [
        {"name": t["name"], "description": t.get("description") or ""}
        for t in settings.get("tools") or []
    ]
    return agent
