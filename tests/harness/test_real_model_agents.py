"""The two real agents play real episodes against a real model.

mini-swe-agent (its own `DefaultAgent` loop and prompts) and Claude Code (through the capture
proxy's conversion of its Anthropic requests to the OpenAI dialect) each play a repo_env episode
and a terminal_env episode, with SmolLM2-135M-Instruct on the other end of the proxy. A 135M
model mostly fails these tasks; what is checked is what a user with a real model relies on:

- the episode ends cleanly whatever the model says (no turn is an infrastructure failure);
- every model call the server answered is in the episode's record (equal counts);
- each recorded call's token ids decode, with the model's tokenizer, to the recorded answer
  (text and tool calls), with a logprob per token;
- the episode's reward is the environment's verifier's.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.harness import HarnessConfig
from openenv.core.harness.adapter import AgenticHarnessAdapter
from openenv.core.harness.agents.claude_code import ClaudeCodeAdapter, find_claude
from openenv.core.harness.agents.mini_swe_agent import MiniSweAgentAdapter
from openenv.core.harness.environment import HarnessAction, HarnessEnvironment
from openenv.models.server import ModelServer, request_counts
from openenv.models.tool_format import parse_answer

# Each episode is minutes of CPU for the model on a loaded 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: Claude Code's own prompt and tool list take ~22,000 tokens, more than the model's 8,192.
CLAUDE_TOOLS = ["Bash", "Read", "Edit"]
CLAUDE_PROMPT = (
    "You are a coding agent working in the current folder. Use your tools to inspect and "
    "change files, then call the environment's submit tool when the task is done."
)


@pytest.fixture(scope="module")
def model(real_model: Any) -> Iterator[ModelServer]:
    """The session's model, served with short answers (agents ask for thousands of tokens)."""
    with ModelServer(engine=real_model.engine, max_tokens_limit=96) as server:
        yield server


@dataclass
class Episode:
    turns: list[Any]
    final: Any
    calls: list[dict[str, Any]]
    answered: int


def _play(
    model: ModelServer,
    adapter: AgenticHarnessAdapter,
    env: Any,
    messages: list[str],
) -> Episode:
    """Reset the harness on `env`, play `messages` as turns until the episode ends, then, if
    the agent never submitted, submit what is there: the verifier grades the workspace."""
    before = request_counts(model.url).get("answered", 0)
    harness = HarnessEnvironment(adapter, env=env)

    async def go() -> tuple[list[Any], Any]:
        await harness.reset_async()
        turns = []
        for message in messages:
            observation = await harness.step_async(HarnessAction(message=message))
            turns.append(observation)
            if observation.done:
                return turns, observation
        final = await harness.step_async(CallToolAction(tool_name="submit", arguments={}))
        return turns, final

    try:
        turns, final = asyncio.run(go())
        calls = harness.model_calls
    finally:
        harness.close()
    answered = request_counts(model.url).get("answered", 0) - before
    return Episode(turns, final, calls, int(answered))


def _check_record(episode: Episode, tokenizer: Any) -> None:
    for turn in episode.turns:
        assert turn.metadata.get("category") != "infrastructure", turn.metadata.get("error")
        assert "model_calls" in turn.metadata
    # Every call the model answered is in the record, and nothing else is.
    assert episode.answered > 0
    assert len(episode.calls) == episode.answered
    for call in episode.calls:
        assert call["error"] is None, call["error"]
        ids, logprobs = call["completion_token_ids"], call["logprobs"]
        assert ids and logprobs and len(ids) == len(logprobs)
        assert all(lp <= 0 for lp in logprobs)
        assert call["prompt_token_ids"]
        # The ids are exactly the answer: its text, and any tool calls parsed out of it.
        parsed = parse_answer(tokenizer.decode(ids, skip_special_tokens=True))
        if call["tool_calls"]:
            assert [c["name"] for c in parsed.tool_calls] == [c["name"] for c in call["tool_calls"]]
            assert [c["arguments"] for c in parsed.tool_calls] == [
                c["arguments"] for c in call["tool_calls"]
            ]
            assert (parsed.content or "") == (call["response_text"] or "")
        else:
            assert tokenizer.decode(ids, skip_special_tokens=True) == call["response_text"]


# -- the environments ----------------------------------------------------------------------------


@pytest.fixture
def repo() -> Iterator[Any]:
    from repo_env.server.repo_environment import RepoEnvironment

    environment = RepoEnvironment()
    environment.reset(task_id="roman-1")
    yield environment
    environment.close()


@pytest.fixture
def terminal() -> Iterator[Any]:
    from terminal_env.server.tools_environment import TerminalToolEnvironment

    environment = TerminalToolEnvironment()
    environment.reset(task_id="create-greeting")
    yield environment
    environment.close()


def _repo_grade(repo: Any) -> float:
    grade = repo.state.grade
    assert grade is not None, "the verifier never ran"
    return float(grade["reward"])


def _terminal_grade(terminal: Any) -> float:
    state = terminal.state
    assert state.submitted and state.score is not None, "the verifier never ran"
    return float(state.score)


REPO_TASK = "toRoman in src/roman/__init__.py accepts non-integers. Make it raise for them."
TERMINAL_TASK = "Create a file named hello.txt whose only line is exactly: Hello, world!"
ENVIRONMENTS = {"repo": (_repo_grade, REPO_TASK), "terminal": (_terminal_grade, TERMINAL_TASK)}


def _mini_swe_agent(config: HarnessConfig) -> AgenticHarnessAdapter:
    if importlib.util.find_spec("minisweagent") is None:
        pytest.skip("mini-swe-agent is not installed (the dev group and the `harness` extra)")
    return MiniSweAgentAdapter(config, step_limit=3, model_attempts=1)


def _claude_code(config: HarnessConfig) -> AgenticHarnessAdapter:
    if find_claude() is None:
        pytest.skip(
            "Claude Code is not installed (npm install --prefix "
            "~/.cache/openenv-tests/claude-code @anthropic-ai/claude-code; .ci/run does)"
        )
    return ClaudeCodeAdapter(
        config, model_attempts=1, tools=CLAUDE_TOOLS, system_prompt=CLAUDE_PROMPT
    )


AGENTS = {"mini-swe-agent": _mini_swe_agent, "claude-code": _claude_code}


@pytest.mark.parametrize("kind", sorted(ENVIRONMENTS))
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_a_real_agent_plays_an_episode_against_the_real_model(
    request: pytest.FixtureRequest, model: ModelServer, agent: str, kind: str
) -> None:
    if kind == "repo" and shutil.which("git") is None:
        pytest.skip("repo_env needs git")
    env = request.getfixturevalue(kind)
    grade, task = ENVIRONMENTS[kind]
    config = HarnessConfig(
        name=agent,
        working_directory=str(env.host_workspace),  # the agent works on the episode's files
        model_url=model.url,
        model=model.model_name,
        startup_timeout_s=120,
        session_timeout_s=600,
    )
    episode = _play(model, AGENTS[agent](config), env, [task])
    _check_record(episode, model.engine.tokenizer)
    if agent == "claude-code":
        # It spoke the Anthropic dialect; the proxy converted it for the OpenAI server.
        assert {call["dialect"] for call in episode.calls} == {"anthropic"}
        assert {call["upstream_dialect"] for call in episode.calls} == {"openai_chat"}
    assert episode.final.reward == grade(env)
