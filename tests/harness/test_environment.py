"""HarnessEnvironment with a real harness process and the real MCP bridge."""

from __future__ import annotations

import os

import pytest

from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.harness import HarnessNotRunningError
from openenv.core.harness.environment import HarnessAction, HarnessEnvironment
from openenv.core.rubrics import Rubric
from openenv.core.rubrics.trajectory import TrajectoryRubric
from tests.harness.echo_adapter import EchoAdapter
from tests.harness.harness_app import tools


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


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
    assert (first.done, first.reward) == (False, 0.0)
    assert env.state.episode_id == "ep-1" and env.state.step_count == 2
    assert [event.type.value for event in env.trajectory] == events_of(first) + events_of(second)


def test_reset_starts_a_fresh_harness(env):
    env.reset()
    env.step(HarnessAction(message="remember me"))
    old_pid = env.adapter.process.pid
    env.reset()
    assert not _pid_alive(old_pid)
    assert env.state.step_count == 0 and env.trajectory == []
    assert env.step(HarnessAction(message="new")).metadata["response"] == "new"


def test_reserved_names_are_unreachable_through_the_bridge(env):
    env.reset()
    turn = env.step(HarnessAction(message="call:reset {}"))
    assert "reset" in turn.metadata["turn_events"][1]["data"]["error"]
    for name in ("step", "state", "close"):
        turn = env.step(HarnessAction(message=f"call:{name} {{}}"))
        assert turn.metadata["turn_events"][1]["data"]["error"]
    # The episode went on, untouched by the attempts.
    assert env.state.step_count == 4
    assert env.step(HarnessAction(message="still here")).metadata["turn_number"] == 5


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
    assert not _pid_alive(pid) and env.bridge_url is None
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
        assert not _pid_alive(pid)
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
    assert not _pid_alive(pid) and env.bridge_url is None and url
    assert env.adapter.pids == [pid]


def test_no_tools_means_no_bridge(tmp_path):
    env = HarnessEnvironment(EchoAdapter(str(tmp_path)))
    try:
        assert env.reset().metadata["injected_tools"] == []
        assert env.adapter.bridge_url is None
        assert env.step(HarnessAction(message="x")).metadata["response"] == "x"
    finally:
        env.close()
