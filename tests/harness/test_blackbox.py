"""Black-box rollouts with an agent harness (`AgentHarnessAdapter`): the agent is the real child
process of `echo_agent.py`, which calls the session's tools over the real MCP bridge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from openenv.core.env_server.mcp_types import Tool
from openenv.core.harness import (
    AgentHarnessAdapter,
    HarnessError,
    HarnessRunLimits,
    ResourceSession,
    ToolResult,
    VerifyResult,
    build_harness_rollout_func,
)
from openenv.core.harness.sessions import observation_messages

from .echo_adapter import EchoAdapter, process_gone


class AddSession(ResourceSession):
    """Asks for one `add` call; the call ends the episode with reward 1 when the sum is right."""

    def __init__(self, opening: str, fail_with: BaseException | None = None) -> None:
        self.opening = opening
        self.fail_with = fail_with
        self.calls: list[dict[str, Any]] = []
        self.reward: float | None = None
        self.closed = False

    def initial_messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.opening}]

    def list_tools(self) -> list[Tool]:
        integer = {"type": "integer"}
        schema = {"type": "object", "properties": {"a": integer, "b": integer}}
        return [Tool(name="add", description="Add two numbers.", input_schema=schema)]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if self.fail_with is not None:
            raise self.fail_with
        self.calls.append(arguments)
        total = arguments["a"] + arguments["b"]
        self.reward = 1.0 if total == 5 else 0.0
        return ToolResult(data=total, done=True, metadata={"reward": self.reward})

    def verify(self, transcript: list[dict[str, Any]], final_state: Any = None) -> VerifyResult:
        return VerifyResult(env_reward=self.reward, done=self.reward is not None)

    def close(self) -> None:
        self.closed = True


class Factory:
    def __init__(self, fail_with: BaseException | None = None) -> None:
        self.sessions: list[AddSession] = []
        self.fail_with = fail_with

    def create(self, task: Any, seed: Any = None, episode_id: Any = None) -> AddSession:
        session = AddSession(str(task), self.fail_with)
        self.sessions.append(session)
        return session


def test_the_agent_runs_the_episode_on_the_sessions_tools(tmp_path: Path) -> None:
    agents: list[EchoAdapter] = []

    def make_agent() -> EchoAdapter:
        agents.append(EchoAdapter(str(tmp_path)))
        return agents[-1]

    session = AddSession('call:add {"a": 2, "b": 3}')
    result = AgentHarnessAdapter(make_agent).run_black_box(session)

    assert session.calls == [{"a": 2, "b": 3}]
    assert [(e.tool_name, e.arguments, e.result.data) for e in result.tool_trace] == [
        ("add", {"a": 2, "b": 3}, 5)
    ]
    assert result.done and result.metrics["stop_reason"] == "done"
    assert result.metrics["turns"] == 1
    assert [m["role"] for m in result.messages] == ["user", "assistant"]
    assert [e.type for e in result.events if e.type.startswith("tool_")] == [
        "tool_call",
        "tool_result",
    ]
    assert all(process_gone(pid) for pid in agents[0].pids)


def test_an_agent_that_answers_early_is_told_to_continue_up_to_max_turns(tmp_path: Path) -> None:
    session = AddSession("hello")  # the echo agent answers without a tool call
    limits = HarnessRunLimits(max_turns=3)
    result = AgentHarnessAdapter(lambda: EchoAdapter(str(tmp_path))).run_black_box(session, limits)
    assert not result.done
    assert result.metrics["turns"] == 3 and result.metrics["stop_reason"] == "max_turns"
    # The echo agent answers with every message of its episode: context kept across turns.
    assert result.messages[-1]["content"].startswith("hello | The task is not finished")


def test_the_tool_call_limit_is_enforced(tmp_path: Path) -> None:
    session = AddSession('call:add {"a": 1, "b": 1}')
    session_limits = HarnessRunLimits(max_turns=2, max_total_tool_calls=0)
    result = AgentHarnessAdapter(lambda: EchoAdapter(str(tmp_path))).run_black_box(
        session, session_limits
    )
    assert session.calls == []  # refused before it reached the environment
    assert result.metrics["stop_reason"] == "max_total_tool_calls"
    tool_results = [e.payload for e in result.events if e.type == "tool_result"]
    assert "limit" in tool_results[0]["error"]


def test_a_broken_environment_fails_the_rollout_instead_of_scoring_it(tmp_path: Path) -> None:
    session = AddSession('call:add {"a": 2, "b": 3}', fail_with=RuntimeError("server gone"))
    with pytest.raises(HarnessError, match="server gone"):
        AgentHarnessAdapter(lambda: EchoAdapter(str(tmp_path))).run_black_box(session)


def test_rollout_func_runs_black_box_episodes_in_parallel_in_order(tmp_path: Path) -> None:
    factory = Factory()
    rollout = build_harness_rollout_func(
        session_factory=factory,
        harness_adapter=AgentHarnessAdapter(lambda: EchoAdapter(str(tmp_path))),
        max_concurrency=2,
    )
    prompts = ['call:add {"a": 2, "b": 3}', 'call:add {"a": 1, "b": 1}']
    out = rollout(prompts, None)
    assert out["env_reward"] == [1.0, 0.0]
    assert out["infra_failed"] == [False, False]
    assert all(session.closed for session in factory.sessions)

    broken = build_harness_rollout_func(
        session_factory=Factory(fail_with=RuntimeError("server gone")),
        harness_adapter=AgentHarnessAdapter(lambda: EchoAdapter(str(tmp_path))),
    )
    failed = broken(prompts[:1], None)
    assert failed["env_reward"] == [None]
    assert failed["infra_failed"] == [True]
    assert "server gone" in failed["rollout_errors"][0]


class TwoToolSession(AddSession):
    """`add` and `echo` (a built-in of the echo agent, so it reaches the agent as `env_echo`),
    with the opening `observation_messages` writes."""

    def initial_messages(self) -> list[dict[str, Any]]:
        return observation_messages({"text": "Add 2 and 3."}, tools=self.list_tools())

    def list_tools(self) -> list[Tool]:
        echo = Tool(name="echo", description="Echo.", input_schema={"type": "object"})
        return [*super().list_tools(), echo]


def test_the_opening_names_the_tools_as_the_agent_sees_them(tmp_path: Path) -> None:
    session = TwoToolSession("")
    assert "Use the tools: add, echo." in session.initial_messages()[0]["content"]
    result = AgentHarnessAdapter(lambda: EchoAdapter(str(tmp_path))).run_black_box(
        session, HarnessRunLimits(max_turns=1)
    )
    opening, answer = result.messages
    # The environment serves `echo` as `env_echo` (the agent's own `echo` keeps its name).
    assert "Use the tools: add, env_echo." in opening["content"]
    assert "echo." not in opening["content"].replace("env_echo.", "")
    assert "Observation (JSON):" in opening["content"]
    # What the agent was sent (it echoes its messages) is what the rollout records.
    assert answer["content"] == opening["content"]


def test_each_agent_names_the_environment_tools_its_own_way() -> None:
    from openenv.core.harness.agents.claude_code import ClaudeCodeAdapter
    from openenv.core.harness.agents.mini_swe_agent import MiniSweAgentAdapter

    names = ["env_bash", "submit"]  # `bash` renamed: mini-swe-agent has a bash tool
    assert EchoAdapter(".").tools_sentence(names) == "Use the tools: env_bash, submit."
    assert ClaudeCodeAdapter().tools_sentence(names) == (
        "Use the tools: mcp__env__env_bash, mcp__env__submit."
    )
    sentence = MiniSweAgentAdapter().tools_sentence(names)
    assert sentence.startswith(
        "Use the tools: bash, and through it the environment's "
        "`openenv-tool env_bash`, `openenv-tool submit`"
    )
    assert "openenv-tool NAME '<JSON arguments>'" in sentence
