"""HarnessEnvironment with a real harness process and the real MCP bridge."""

from __future__ import annotations

import pytest
from fastmcp import FastMCP

from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.env_server.types import State
from openenv.core.harness import HarnessNotRunningError
from openenv.core.harness.environment import HarnessAction, HarnessEnvironment
from openenv.core.rubrics import Rubric
from openenv.core.rubrics.trajectory import TrajectoryRubric
from tests.harness.echo_adapter import EchoAdapter, process_gone
from tests.harness.harness_app import tools


@pytest.fixture
def env(tmp_path):
    environment = HarnessEnvironment(EchoAdapter(str(tmp_path)), tools())
    yield environment
    environment.close()


def events_of(observation) -> list[str]:
    return [event["type"] for event in observation.metadata["turn_events"]]


def test_tools_are_injected_with_a_prefix_on_a_clash_and_served_over_mcp(env):
    observation = env.reset()
    assert observation.metadata["injected_tools"] == ["env_echo", "add"]
    assert [tool.name for tool in env.adapter.tools] == ["env_echo", "add"]
    assert env.adapter.bridge_url.startswith("http://127.0.0.1:")

    turn = env.step(HarnessAction(message='call:env_echo {"text": "hi"}'))
    call, result = turn.metadata["turn_events"][:2]
    assert call["data"] == {"tool_name": "env_echo", "arguments": {"text": "hi"}}
    assert result["data"]["result"] == "env:hi" and result["data"]["error"] is None
    turn = env.step(HarnessAction(message='call:add {"a": 2, "b": 3}'))
    assert turn.metadata["turn_events"][1]["data"]["result"] == 5


def test_turns_stream_events_and_keep_the_conversation(env):
    env.reset(episode_id="ep-1")
    first = env.step(HarnessAction(message="hello"))
    second = env.step(HarnessAction(message="again"))
    assert events_of(first) == ["text_output", "turn_complete"]
    assert first.metadata["response"] == "hello"
    assert second.metadata["response"] == "hello | again"  # the harness remembers the turn
    assert (first.metadata["turn_number"], second.metadata["turn_number"]) == (1, 2)
    assert (first.done, first.reward) == (False, None)  # no environment reward, not 0
    assert env.state.episode_id == "ep-1" and env.state.step_count == 2
    assert [event.type.value for event in env.trajectory] == events_of(first) + events_of(second)


def test_reset_starts_a_fresh_harness(env):
    env.reset()
    env.step(HarnessAction(message="remember me"))
    old_pid = env.adapter.process.pid
    env.reset()
    assert process_gone(old_pid)
    assert env.state.step_count == 0 and env.trajectory == []
    assert env.step(HarnessAction(message="new")).metadata["response"] == "new"


def test_reserved_names_are_unreachable_through_the_bridge(env):
    env.reset()
    turn = env.step(HarnessAction(message="call:reset {}"))
    assert "reset" in turn.metadata["turn_events"][1]["data"]["error"]
    turn = env.step(HarnessAction(message="call:step {}"))
    assert turn.metadata["turn_events"][1]["data"]["error"]  # (all four: test_bridge.py)
    # The episode went on, untouched by the attempts.
    assert env.state.step_count == 2
    assert env.step(HarnessAction(message="still here")).metadata["turn_number"] == 3


def test_a_crash_is_an_infrastructure_failure_not_a_reward_of_zero(env):
    env.reset()
    env.step(HarnessAction(message="fine"))
    pid = env.adapter.process.pid
    failed = env.step(HarnessAction(message="crash"))
    assert failed.done is True and failed.reward is None
    assert failed.metadata["error_type"] == "harness_crashed"
    assert failed.metadata["category"] == "infrastructure"
    assert failed.metadata["turn_events"][-1]["type"] == "error"
    assert failed.metadata["turn_events"][-1]["data"]["recoverable"] is False
    assert process_gone(pid) and env.bridge_url is None
    with pytest.raises(HarnessNotRunningError):
        env.step(HarnessAction(message="after the crash"))


def test_a_turn_that_runs_out_of_time_ends_the_episode_unscored(tmp_path):
    env = HarnessEnvironment(EchoAdapter(str(tmp_path), session_timeout_s=0.5), tools())
    try:
        env.reset()
        pid = env.adapter.process.pid
        failed = env.step(HarnessAction(message="hang"))
        assert failed.metadata["error_type"] == "turn_timeout"
        assert (failed.done, failed.reward) == (True, None)
        assert process_gone(pid)
    finally:
        env.close()


class _Steps(TrajectoryRubric):
    def score_trajectory(self, trajectory):
        return float(len(trajectory))

    def compute_step_rewards(self):
        return [1.0] * len(self._trajectory)


class _Length(Rubric):
    def forward(self, action, observation):
        return len(observation.metadata["response"]) / 100


def test_the_rubric_scores_turns_and_the_trajectory(tmp_path):
    env = HarnessEnvironment(EchoAdapter(str(tmp_path)), tools(), rubric=_Length())
    try:
        env.reset()
        assert env.step(HarnessAction(message="abcd")).reward == pytest.approx(0.04)
    finally:
        env.close()
    env = HarnessEnvironment(EchoAdapter(str(tmp_path)), tools(), rubric=_Steps())
    try:
        env.reset()
        assert env.step(HarnessAction(message="one")).reward == 0.0  # intermediate
        assert env.step(HarnessAction(message="done")).reward == 2.0  # the whole episode
        env.reset()
        assert env.step(HarnessAction(message="crash")).reward is None
        assert env.rubric.num_steps == 0  # a failure is not part of any scored trajectory
    finally:
        env.close()


def test_tool_actions_still_route_to_the_tools(env):
    env.reset()
    listed = env.step(ListToolsAction())
    assert [tool.name for tool in listed.tools] == ["echo", "add"]
    called = env.step(CallToolAction(tool_name="add", arguments={"a": 1, "b": 1}))
    assert called.result.data == 2
    with pytest.raises(TypeError):
        env.step(CallToolAction.__base__())  # type: ignore[call-arg]


def test_close_leaves_no_process_behind(tmp_path):
    env = HarnessEnvironment(EchoAdapter(str(tmp_path)), tools())
    env.reset()
    pid = env.adapter.process.pid
    url = env.bridge_url
    env.close()
    assert process_gone(pid) and env.bridge_url is None and url
    assert env.adapter.pids == [pid]


def test_no_tools_means_no_bridge(tmp_path):
    env = HarnessEnvironment(EchoAdapter(str(tmp_path)))
    try:
        assert env.reset().metadata["injected_tools"] == []
        assert env.adapter.bridge_url is None
        assert env.step(HarnessAction(message="x")).metadata["response"] == "x"
    finally:
        env.close()


# -- the wrapped environment's reward ---------------------------------------------------------


class _Graded(MCPEnvironment):
    """Grades like `RepoEnvironment`: `submit` ends the episode, and the step (not the tool)
    puts the grade in the observation, 0.0 before; the grade is in its state too."""

    def __init__(self) -> None:
        mcp = FastMCP("graded")

        @mcp.tool
        def echo(text: str) -> str:
            return text

        @mcp.tool
        def submit(answer: int) -> str:
            self._state.grade = 1.0 if answer == 42 else 0.0
            return "submitted"

        super().__init__(mcp)
        self._state = State(episode_id="graded", step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs):
        self._state = State(episode_id=episode_id or "graded", step_count=0)
        return super().step(ListToolsAction())  # any observation

    @property
    def state(self) -> State:
        return self._state

    async def step_async(self, action, timeout_s=None, **kwargs):
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction):
            self._state.step_count += 1
            grade = getattr(self._state, "grade", None)
            observation.reward = 0.0 if grade is None else grade
            observation.done = grade is not None
        return observation


def test_a_turn_carries_the_wrapped_environments_reward(tmp_path):
    graded = _Graded()
    graded.reset()
    env = HarnessEnvironment(EchoAdapter(str(tmp_path)), env=graded)
    try:
        assert env.reset().metadata["injected_tools"] == ["env_echo", "submit"]
        talk = env.step(HarnessAction(message="thinking"))
        assert (talk.reward, talk.done) == (None, False)  # no step of the environment: no reward
        echoed = env.step(HarnessAction(message='call:env_echo {"text": "hi"}'))
        assert echoed.metadata["turn_events"][1]["data"]["result"] == "hi"
        assert (echoed.reward, echoed.metadata["env_rewards"]) == (0.0, [0.0])
        direct = env.step(CallToolAction(tool_name="echo", arguments={"text": "x"}))
        assert (direct.result.data, direct.reward) == ("x", 0.0)  # a step of the environment too
        graded_turn = env.step(HarnessAction(message='call:submit {"answer": 42}'))
        # The environment graded the episode 1.0: so does the turn (OpenEnv's says 0.0).
        assert graded.state.grade == 1.0 and graded.state.step_count == 3
        assert (graded_turn.reward, graded_turn.done) == (1.0, True)
        assert graded_turn.metadata["env_rewards"] == [1.0]
    finally:
        env.close()


def test_tools_alone_give_no_reward_not_zero(tmp_path):
    graded = _Graded()
    graded.reset()
    env = HarnessEnvironment(EchoAdapter(str(tmp_path)), mcp=graded.mcp_server)
    try:
        env.reset()
        turn = env.step(HarnessAction(message='call:submit {"answer": 42}'))
        assert graded.state.grade == 1.0
        # The tools ran outside the environment's step: it gave no reward, and none is made up.
        assert turn.reward is None and "env_rewards" not in turn.metadata
    finally:
        env.close()
    with pytest.raises(ValueError, match="not both"):
        HarnessEnvironment(EchoAdapter(str(tmp_path)), mcp=tools(), env=graded)
