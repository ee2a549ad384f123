"""The trainer-side rollout layer on real servers: white-box episodes on an MCP environment
(echo) and a game (connect4), limits, the TRL rollout_func (parallel, in order, failures never
scored 0), the JSON-RPC bridge and black-box runs."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from openenv.core.env_server.mcp_types import Tool
from openenv.core.harness import (
    RESERVED_TOOL_NAMES,
    CLIHarnessAdapter,
    HarnessRolloutResult,
    HarnessRunLimits,
    MCPHarnessAdapter,
    ModelStepResult,
    ResourceSession,
    SessionMCPBridge,
    StepEnvSessionAdapter,
    ToolResult,
    ToolTraceEntry,
    VerifyResult,
    build_harness_rollout_func,
)
from openenv.core.harness.rollout import LoopOwningSession, TrainableSession
from openenv.core.harness.sessions import EnvSessionFactory, scripted_model_step
from openenv.core.harness.training import TrainingTrace
from openenv.core.llm_client import LLMResponse, ToolCall


def calls(*pairs: tuple[str, dict[str, Any]]) -> ModelStepResult:
    return ModelStepResult(
        response=LLMResponse(
            content="",
            tool_calls=[ToolCall(id=f"c{i}", name=n, args=a) for i, (n, a) in enumerate(pairs)],
        ),
        prompt_ids=[1, 2],
        completion_ids=[3],
        logprobs=[-0.5],
    )


def replay(*steps: ModelStepResult) -> Any:
    """A model step answering from a list (the model's side of a white-box test)."""
    queue = list(steps)

    def step(messages: list[dict[str, Any]], tools: list[Tool], sampling: dict[str, Any]):
        return queue.pop(0) if queue else ModelStepResult(response=LLMResponse(content="done"))

    return step


# -- white-box on real environments ----------------------------------------------------------


def test_echo_mcp_tools_become_the_session_tools(echo_url: str) -> None:
    session = EnvSessionFactory(echo_url).create(task="Say hi.")
    try:
        names = [tool.name for tool in session.list_tools()]
        assert names == ["echo_message", "echo_with_length"]
        assert session.initial_messages()[0]["content"].startswith("Say hi.")
        rollout = MCPHarnessAdapter().run_white_box(
            replay(calls(("echo_message", {"message": "hi there"}))), session
        )
    finally:
        session.close()
    assert rollout.done and rollout.metrics["stop_reason"] == "no_tool_calls"
    tool_messages = [m for m in rollout.messages if m["role"] == "tool"]
    assert tool_messages == [
        {"role": "tool", "tool_call_id": "c0", "name": "echo_message", "content": "hi there"}
    ]
    assert rollout.prompt_ids == [1, 2] and rollout.completion_ids == [3]


def test_a_wrong_tool_call_is_shown_to_the_model_and_the_episode_goes_on(echo_url: str) -> None:
    session = EnvSessionFactory(echo_url).create(task=None)
    try:
        rollout = MCPHarnessAdapter().run_white_box(
            replay(
                calls(("no_such_tool", {})),
                calls(("echo_message", {"wrong": 1})),
                calls(("echo_message", {"message": "ok"})),
            ),
            session,
        )
    finally:
        session.close()
    errors = [entry.result.error for entry in rollout.tool_trace]
    assert errors[0] and "no_such_tool" in errors[0]
    assert errors[1]  # invalid arguments: the environment said so
    assert errors[2] is None and rollout.tool_trace[2].result.data == "ok"
    assert rollout.messages[-2]["content"] == "ok"


def test_connect4_game_reward_comes_from_the_environment(connect4_url: str) -> None:
    factory = EnvSessionFactory(connect4_url)
    session = factory.create(task=None, seed=3)
    try:
        (tool,) = session.list_tools()
        assert tool.name == "act" and tool.input_schema["required"] == ["column"]
        assert "metadata" not in tool.input_schema["properties"]
        rollout = MCPHarnessAdapter().run_white_box(
            scripted_model_step, session, HarnessRunLimits(max_turns=30)
        )
        verify = session.verify(rollout.messages)
    finally:
        session.close()
    # Always the first legal column against the greedy opponent: the game ends, a loss.
    assert rollout.done and rollout.metrics["stop_reason"] == "done"
    assert verify.done and verify.env_reward == rollout.tool_trace[-1].result.metadata["reward"]
    assert verify.env_reward == -1.0


def test_reset_kwargs_and_seed_reach_the_environment(connect4_url: str) -> None:
    session = EnvSessionFactory(connect4_url, reset_kwargs={"opponent": "random"}).create(
        task=None, seed=11
    )
    try:
        state = session.verify([]).artifacts["final_state"]
    finally:
        session.close()
    assert state["seed"] == 11 and state["opponent"] == "random"


# -- limits ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "tool_calls", "stop_reason"),
    [
        (HarnessRunLimits(max_turns=2), 4, "max_turns"),
        (HarnessRunLimits(max_turns=5, max_tool_calls_per_turn=1), 5, "max_turns"),
        (HarnessRunLimits(max_turns=5, max_total_tool_calls=3), 3, "max_total_tool_calls"),
        (HarnessRunLimits(max_turns=5, max_wall_time_s=0.0), 0, "max_wall_time"),
    ],
    ids=["turns", "per-turn", "total", "wall-time"],
)
def test_limits_stop_the_episode_and_say_why(
    echo_url: str, limits: HarnessRunLimits, tool_calls: int, stop_reason: str
) -> None:
    two_calls = calls(("echo_message", {"message": "a"}), ("echo_message", {"message": "b"}))
    session = EnvSessionFactory(echo_url).create(task=None)
    try:
        rollout = MCPHarnessAdapter().run_white_box(replay(*[two_calls] * 5), session, limits)
    finally:
        session.close()
    assert len(rollout.tool_trace) == tool_calls
    assert rollout.metrics["stop_reason"] == stop_reason and rollout.metrics["truncated"]
    if limits.max_tool_calls_per_turn:  # the call not run is answered all the same
        answered = [m["tool_call_id"] for m in rollout.messages if m["role"] == "tool"]
        assert answered == ["c0", "c1"] * 5
        assert rollout.messages[3]["content"].startswith("error: not run")
    assert not rollout.done


# -- the TRL rollout_func ------------------------------------------------------------------------


class CountingSession(ResourceSession):
    """An in-memory session whose reward is its task; `gate` makes episodes overlap."""

    def __init__(self, task: int, gate: threading.Barrier | None) -> None:
        self.task, self.gate, self.closed = task, gate, False

    def initial_messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": str(self.task)}]

    def list_tools(self) -> list[Tool]:
        return [Tool(name="finish")]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if self.gate is not None:
            self.gate.wait()  # passes only when every episode is running at once
        return ToolResult(data="ok", done=True, metadata={"reward": float(self.task)})

    def verify(self, transcript: list[dict[str, Any]], final_state: Any = None) -> VerifyResult:
        return VerifyResult(env_reward=float(self.task), done=True)

    def close(self) -> None:
        self.closed = True


class Factory:
    def __init__(self, gate: threading.Barrier | None = None, broken: set[int] = frozenset()):
        self.gate, self.broken, self.sessions = gate, broken, []

    def create(self, task: int, seed: int | None = None, episode_id: str | None = None):
        if task in self.broken:
            raise ConnectionError("sandbox could not start")
        session = CountingSession(task, self.gate)
        self.sessions.append(session)
        return session


def finish_step(trainer: Any, session: ResourceSession) -> Any:
    return replay(calls(("finish", {})))


def test_rollout_func_runs_prompts_in_parallel_and_keeps_their_order() -> None:
    factory = Factory(gate=threading.Barrier(4, timeout=60))
    rollout_func = build_harness_rollout_func(
        session_factory=factory,
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=finish_step,
        max_concurrency=4,
    )
    out = rollout_func([3, 1, 2, 0], None)
    assert out["env_reward"] == [3.0, 1.0, 2.0, 0.0]
    assert out["infra_failed"] == [False] * 4 and out["rollout_errors"] == [None] * 4
    assert out["prompt_ids"] == [[1, 2]] * 4 and out["logprobs"] == [[-0.5]] * 4
    assert all(session.closed for session in factory.sessions)


def test_an_infrastructure_failure_is_reported_never_scored_zero() -> None:
    rollout_func = build_harness_rollout_func(
        session_factory=Factory(broken={1}),
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=finish_step,
        reward_key="reward",
        max_concurrency=2,
    )
    out = rollout_func([0, 1, 2], None)
    assert out["reward"] == [0.0, None, 2.0]
    assert out["infra_failed"] == [False, True, False]
    assert "sandbox could not start" in out["rollout_errors"][1]


def test_an_unreachable_environment_is_an_infrastructure_failure(dead_url: str) -> None:
    rollout_func = build_harness_rollout_func(
        session_factory=EnvSessionFactory(dead_url),
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=lambda trainer, session: scripted_model_step,
    )
    out = rollout_func(["task"], None)
    assert out["env_reward"] == [None] and out["infra_failed"] == [True]


def test_an_environment_without_reward_gets_none_and_says_so(echo_url: str) -> None:
    rollout_func = build_harness_rollout_func(
        session_factory=EnvSessionFactory(echo_url),
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=lambda trainer, session: scripted_model_step,
        limits=HarnessRunLimits(max_turns=1),
    )
    out = rollout_func(["a", "b"], None)
    assert out["env_reward"] == [None, None] and out["infra_failed"] == [False, False]
    assert all("no environment reward" in e for e in out["rollout_errors"])


def test_rollout_func_on_a_real_game_in_parallel(connect4_url: str) -> None:
    rollout_func = build_harness_rollout_func(
        session_factory=EnvSessionFactory(connect4_url),
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=lambda trainer, session: scripted_model_step,
        limits=HarnessRunLimits(max_turns=30),
        max_concurrency=3,
    )
    out = rollout_func([{"reset_kwargs": {"seed": s}} for s in range(3)], None)
    assert out["infra_failed"] == [False] * 3
    assert all(r is not None and math.isfinite(r) for r in out["env_reward"])


def test_verify_contradicting_the_environment_is_an_error_not_a_score() -> None:
    class Liar(CountingSession):
        def verify(self, transcript: Any, final_state: Any = None) -> VerifyResult:
            return VerifyResult(env_reward=99.0)

    class LiarFactory(Factory):
        def create(self, task: int, seed: int | None = None, episode_id: str | None = None):
            return Liar(task, None)

    out = build_harness_rollout_func(
        session_factory=LiarFactory(),
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=finish_step,
    )([1], None)
    assert out["env_reward"] == [None] and "forward" in out["rollout_errors"][0]


# -- sessions, bridge, black box -------------------------------------------------------------


def test_reserved_tool_names_are_refused(connect4_url: str) -> None:
    from openenv.core.generic_client import GenericEnvClient

    for name in sorted(RESERVED_TOOL_NAMES):
        with pytest.raises(ValueError, match="reserved"):
            StepEnvSessionAdapter(
                GenericEnvClient(base_url=connect4_url),
                tool_specs=[Tool(name=name)],
                action_builder=lambda n, a: a,
                initial_messages_builder=lambda r, t: [],
            )


def test_session_mcp_bridge_speaks_json_rpc(connect4_url: str) -> None:
    session = EnvSessionFactory(connect4_url).create(task=None)
    bridge = SessionMCPBridge(session)
    try:
        listed = bridge.handle_request({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert [t["name"] for t in listed["result"]["tools"]] == ["act"]
        called = bridge.handle_request(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "act", "arguments": {"column": 3}},
            }
        )
        assert called["result"]["done"] is False and called["result"]["error"] is None
        assert called["result"]["data"]["observation"]["board"][-1][3] == 1
        reserved = bridge.handle_request(
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "reset"}}
        )
        assert reserved["error"]["code"] == -32602
        unknown = bridge.handle_request(
            {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "x"}}
        )
        assert unknown["error"]["code"] == -32601
        assert bridge.handle_request({"id": 5, "method": "tools/list"})["error"]["code"] == -32600
    finally:
        session.close()


def test_cli_harness_adapter_runs_an_opaque_agent_through_the_bridge(connect4_url: str) -> None:
    def agent(bridge: SessionMCPBridge, session: Any, limits: HarnessRunLimits):
        """A stand-in for an external agent: it only sees the JSON-RPC bridge."""
        result = HarnessRolloutResult(messages=session.initial_messages())
        for column in (3, 3, 3, 3)[: limits.max_turns]:
            reply = bridge.handle_request(
                {
                    "jsonrpc": "2.0",
                    "id": column,
                    "method": "tools/call",
                    "params": {"name": "act", "arguments": {"column": column}},
                }
            )["result"]
            result.tool_trace.append(ToolTraceEntry("act", {"column": column}, ToolResult(**reply)))
            if reply["done"]:
                result.done = True
                break
        return result

    adapter = CLIHarnessAdapter(agent)
    session = EnvSessionFactory(connect4_url).create(task=None)
    try:
        rollout = adapter.run_black_box(session, HarnessRunLimits(max_turns=2))
        with pytest.raises(NotImplementedError):
            adapter.run_white_box(scripted_model_step, session)
    finally:
        session.close()
    assert len(rollout.tool_trace) == 2
    with pytest.raises(NotImplementedError):
        MCPHarnessAdapter().run_black_box(session)


def test_training_trace_round_trips_and_checks_itself() -> None:
    entries = [
        {
            "prompt_ids": [1],
            "completion_ids": [2, 3],
            "logprobs": [-0.1, -0.2],
            "loss_mask": [0, 1, 1],
            "request": {"messages": []},
            "response": {},
            "metadata": {"node_id": "a"},
            "reward": 0.5,
        }
    ]
    trace = TrainingTrace.from_entries(entries)
    assert trace.turns[0].node_id == "a" and trace.to_trace_entries() == entries
    with pytest.raises(ValueError, match="twice"):
        TrainingTrace.from_entries(entries * 2)
    with pytest.raises(ValueError, match="logprobs"):
        TrainingTrace.from_entries([{**entries[0], "logprobs": [-0.1]}])


def test_loop_owning_protocols_are_structural() -> None:
    class Agent:
        def wait_for_completion(self, timeout_s: float | None = None) -> int:
            return 0

        def fetch_proxy_trace(self) -> list:
            return []

        def fetch_training_trace(self) -> TrainingTrace:
            return TrainingTrace()

    assert isinstance(Agent(), LoopOwningSession) and isinstance(Agent(), TrainableSession)


class FlakyFactory(Factory):
    """Its first session for each task cannot start (a transient infrastructure failure)."""

    def __init__(self, always_broken: set[int] = frozenset()) -> None:
        super().__init__()
        self.seen: set[int] = set()
        self.always_broken = always_broken
        self.lock = threading.Lock()

    def create(self, task: int, seed: int | None = None, episode_id: str | None = None):
        with self.lock:
            first = task not in self.seen
            self.seen.add(task)
        if first or task in self.always_broken:
            raise ConnectionError(f"sandbox for {task} could not start")
        return CountingSession(task, None)


def test_infrastructure_failures_are_retried() -> None:
    out = build_harness_rollout_func(
        session_factory=FlakyFactory(),
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=finish_step,
        max_concurrency=2,
        infra_retries=1,
    )([2, 5], None)
    assert out["env_reward"] == [2.0, 5.0] and out["infra_failed"] == [False, False]


def test_on_infra_failure_raise_refuses_the_batch() -> None:
    from openenv.core.harness.rollout import RolloutInfrastructureError

    rollout_func = build_harness_rollout_func(
        session_factory=FlakyFactory(always_broken={7}),
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=finish_step,
        infra_retries=2,
        on_infra_failure="raise",
    )
    with pytest.raises(RolloutInfrastructureError, match="sandbox for 7") as caught:
        rollout_func([1, 7], None)
    assert list(caught.value.errors) == [1] and caught.value.category == "infrastructure"
