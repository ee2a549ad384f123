"""The real agents (mini-swe-agent, Claude Code) as harnesses, end to end.

Each runs in its sandbox and calls the capture proxy, in front of `ModelStandIn`, which stands
in for a paid model API (no model or key exists here): its script plays the model's side of a
two-turn conversation on the repository environment's `roman-1` task (a bug in `toRoman`),
wrapped as a `HarnessEnvironment` whose MCP tools (run_tests, submit, ...) the agent reaches
through the bridge. The reward is the repository environment's own grade of the agent's fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openenv.core.harness import (
    HarnessConfig,
    HarnessError,
    HarnessNotRunningError,
    HarnessStartupError,
    HarnessTurnTimeoutError,
)
from openenv.core.harness.agents._common import AgentSandbox
from openenv.core.harness.agents.claude_code import ClaudeCodeAdapter, find_claude
from openenv.core.harness.agents.mini_swe_agent import MiniSweAgentAdapter
from openenv.core.harness.capture import CaptureServer
from openenv.core.harness.environment import HarnessAction, HarnessEnvironment
from openenv.sandbox import choose_backend
from openenv.testing.model_standin import ModelStandIn, ScriptedReply

TASK = "roman-1"
BUGGY = "    if not isinstance(n, int):\n        pass\n"
RAISE = 'raise NotIntegerError("decimals cannot be converted")'
FIXED = f"    if not isinstance(n, int):\n        {RAISE}\n"
SOURCE = "src/roman/__init__.py"
SESSION = "episode-1"
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="repo_env needs git")
needs_mini = pytest.mark.skipif(
    importlib.util.find_spec("minisweagent") is None,
    reason="mini-swe-agent is not installed (the dev group and the `harness` extra have it)",
)


def _descendants() -> list[str]:
    """Command lines of every process below this one (to check nothing is left running)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found, stack = [], list(children.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


def _agent_processes() -> list[str]:
    markers = ("mini_swe_driver", "agents.relay", "claude", "bwrap")
    return [line for line in _descendants() if any(m in line for m in markers)]


@pytest.fixture
def repo() -> Iterator[Any]:
    from repo_env.server.repo_environment import RepoEnvironment

    environment = RepoEnvironment()
    environment.reset(task_id=TASK)
    yield environment
    environment.close()


def _workspace(repo: Any) -> Path:
    # The repository environment's episode folder: the agent works on the same files.
    return Path(repo.host_workspace)


def _grade(repo: Any) -> dict[str, Any]:
    grade = repo.state.grade
    assert grade is not None, "the agent never submitted"
    return grade


@contextlib.contextmanager
def _model_behind_capture(script: list[ScriptedReply]) -> Iterator[tuple[ModelStandIn, Any]]:
    """The stand-in, and the capture proxy in front of it with session `SESSION` registered."""
    with ModelStandIn(script) as model, CaptureServer(llm_url=model.url) as capture:
        capture.register_session(SESSION)
        yield model, capture


def _run_two_turns(harness: HarnessEnvironment, first: str, second: str) -> list[Any]:
    async def go() -> list[Any]:
        await harness.reset_async()
        one = await harness.step_async(HarnessAction(message=first))
        two = await harness.step_async(HarnessAction(message=second))
        return [one, two]

    return asyncio.run(go())


def _tool_calls(observation: Any) -> list[dict[str, Any]]:
    return [
        event["data"]
        for event in observation.metadata["turn_events"]
        if event["type"] == "tool_call"
    ]


# -- the relay ---------------------------------------------------------------------------------


def test_sandboxed_agent_reaches_only_its_two_endpoints(tmp_path: Path) -> None:
    if choose_backend(None) != "bubblewrap":
        pytest.skip("only bubblewrap isolates the network (the process backend connects directly)")
    workspace = tmp_path / "workspace"
    host_socket = tmp_path / "host.sock"  # a host Unix socket, outside anything bound in
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(host_socket))
    listener.listen()
    os.chmod(host_socket, 0o777)
    with ModelStandIn([]) as model, ModelStandIn([]) as other:
        sandbox = AgentSandbox(workspace, {"model": model.url, "mcp": None})
        model_port, other_port = (int(server.url.rsplit(":", 1)[1]) for server in (model, other))
        try:
            probe = f"""
import json, socket, urllib.request
def connect(address):
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    try:
        with socket.socket(family) as s:
            s.settimeout(3)
            s.connect(address)
        return "open"
    except OSError as exc:
        return type(exc).__name__
models = urllib.request.urlopen({sandbox.urls["model"] + "/v1/models"!r}, timeout=10).status
print(json.dumps({{"relayed": models, "model_direct": connect(("127.0.0.1", {model_port})),
                  "other_server": connect(("127.0.0.1", {other_port})),
                  "host_socket": connect({str(host_socket)!r}),
                  "outside": connect(("192.0.2.1", 80))}}))
"""
            process = sandbox.spawn([sandbox.box.python, "-c", probe])
            out = process.stdout.read().decode()
            err = process.stderr_tail()
            process.kill()
        finally:
            sandbox.close()
            listener.close()
    result = json.loads(out)
    assert result["relayed"] == 200, err
    # The host's loopback (where every server listens) is another namespace's; nothing else
    # of the host's is bound in.
    assert result["model_direct"] != "open"
    assert result["other_server"] != "open"
    assert result["host_socket"] != "open"
    assert result["outside"] != "open"
    assert sandbox.relay is not None and not sandbox.relay.folder.exists()


def test_adapters_refuse_turns_before_start_and_a_missing_model_url(tmp_path: Path) -> None:
    async def go() -> None:
        for adapter in (MiniSweAgentAdapter(), ClaudeCodeAdapter()):
            with pytest.raises(HarnessNotRunningError):
                await adapter.send_message("hello")
            with pytest.raises(HarnessStartupError, match="model_url"):
                await adapter.start(str(tmp_path))
            assert not await adapter.is_alive()
            await adapter.stop()

    asyncio.run(go())


def test_openenv_tool_reports_bad_usage(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from openenv.core.harness.agents import tool_cli

    assert tool_cli.main(["submit"]) == 2  # no bridge URL: the usage
    assert "openenv-tool NAME" in capsys.readouterr().err
    monkeypatch.setenv(tool_cli.URL_VARIABLE, "http://127.0.0.1:9/mcp")
    assert tool_cli.main(["submit", "[1, 2]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err


# -- mini-swe-agent ----------------------------------------------------------------------------


def _bash(command: str) -> ScriptedReply:
    return ScriptedReply(text="", tool_calls=[{"name": "bash", "arguments": {"command": command}}])


@pytest.mark.slow
@needs_git
@needs_mini
def test_mini_swe_agent_fixes_the_repo_over_two_turns(repo: Any) -> None:
    fix = (
        "sed -i '/if not isinstance(n, int):/{n;s/pass/"
        'raise NotIntegerError("decimals cannot be converted")/}\' ' + SOURCE
    )
    look = f"grep -n -A2 'def toRoman' {SOURCE}"
    script = [
        _bash(look),
        ScriptedReply(text="toRoman lets non-integers through."),
        _bash(fix),
        _bash("openenv-tool submit"),
        ScriptedReply(text="Fixed and submitted."),
    ]
    # HarnessEnvironment puts its own recording proxy in front of the model URL.
    with ModelStandIn(script) as model:
        config = HarnessConfig(
            name="mini-swe-agent",
            working_directory=str(_workspace(repo)),
            model_url=model.url,
            model="standin",
            startup_timeout_s=120,
            session_timeout_s=300,
        )
        harness = HarnessEnvironment(MiniSweAgentAdapter(config), mcp=repo.mcp_server)
        try:
            one, two = _run_two_turns(
                harness, "What is wrong with toRoman?", "Fix it, then submit."
            )
        finally:
            harness.close()
        requests = model.requests
    calls = one.metadata["model_calls"] + two.metadata["model_calls"]
    assert calls == harness.model_calls

    assert one.metadata["response"] == "toRoman lets non-integers through."
    assert [c["arguments"]["command"] for c in _tool_calls(one)] == [look]
    first_results = [e["data"] for e in one.metadata["turn_events"] if e["type"] == "tool_result"]
    assert "def toRoman" in first_results[0]["result"]
    commands = [c["arguments"]["command"] for c in _tool_calls(two)]
    assert commands == [fix, "openenv-tool submit"]
    results = [e["data"] for e in two.metadata["turn_events"] if e["type"] == "tool_result"]
    # `openenv-tool submit` reached the environment's submit tool through the bridge.
    assert json.loads(results[1]["result"])["resolved"] is True
    assert two.metadata["response"] == "Fixed and submitted."
    # The file changed on the host, and the environment's verifier gives full reward.
    assert FIXED in (_workspace(repo) / SOURCE).read_text()
    assert _grade(repo)["reward"] == 1.0
    # Context kept: the second turn's first request carries the whole first turn.
    second_turn = requests[2].body["messages"]
    assert any(m.get("content") == "toRoman lets non-integers through." for m in second_turn)
    assert second_turn[-1] == {"role": "user", "content": "Fix it, then submit."}
    # The proxy recorded every call under the episode's session.
    assert len(one.metadata["model_calls"]) == 2
    assert [c["response_text"] for c in calls if not c["tool_calls"]][-1] == (
        "Fixed and submitted."
    )
    assert len(calls) == len(script)
    assert all(c["error"] is None and c["duration_s"] >= 0 for c in calls)
    # The system prompt told it about the injected tools.
    assert "openenv-tool" in requests[0].body["messages"][0]["content"]
    assert _agent_processes() == []


def _driver_turns(
    tmp_path: Path, model_url: str, messages: list[str], **settings: Any
) -> list[list[dict[str, Any]]]:
    """The events of each turn of the mini-swe-agent driver, run directly (no sandbox)."""
    from openenv.core.harness.agents.mini_swe_driver import KEY_VARIABLE

    settings = {"cwd": str(tmp_path), "model": "standin", "model_url": model_url, **settings}
    env = {**os.environ, KEY_VARIABLE: "key", "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / "cfg")}
    command = [sys.executable, "-m", "openenv.core.harness.agents.mini_swe_driver"]
    with subprocess.Popen(
        [*command, json.dumps(settings)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    ) as driver:
        assert driver.stdin is not None and driver.stdout is not None
        assert json.loads(driver.stdout.readline()) == {"type": "ready"}
        turns = []
        for message in messages:
            driver.stdin.write(json.dumps({"type": "message", "content": message}) + "\n")
            driver.stdin.flush()
            events: list[dict[str, Any]] = []
            while not events or events[-1]["type"] not in ("turn_complete", "fatal"):
                line = driver.stdout.readline()
                assert line, "the driver exited mid-turn"
                events.append(json.loads(line))
            turns.append(events)
        driver.stdin.close()
        assert driver.wait(60) == 0
    return turns


@pytest.mark.slow
@needs_mini
def test_mini_swe_agent_turns_end_cleanly_whatever_the_model_says(tmp_path: Path) -> None:
    """mini-swe-agent's own loop: format errors (an unknown tool, an empty reply, a reply cut
    off at the token limit) go back to the model, three in a row end the turn; a submit ends
    it with `done` and the conversation goes on; so does the per-turn step limit."""
    submit = f"echo {SUBMIT} && echo the result"
    script = [
        ScriptedReply(tool_calls=[{"name": "submit", "arguments": {}}]),
        ScriptedReply(text=""),
        ScriptedReply(text="a very long answer", stop_reason="length"),
        _bash(submit),
        _bash("true"),
        _bash("true"),
        _bash("true"),
        ScriptedReply(text="All done."),
    ]
    tools = [{"name": "env_bash", "description": "Run a command in the environment."}]
    with ModelStandIn(script) as model:
        turns = _driver_turns(
            tmp_path, model.url, ["hello", "go on", "more", "answer"], step_limit=3, tools=tools
        )
        requests = [r.body["messages"] for r in model.requests]

    def kinds(events: list[dict[str, Any]]) -> list[str]:
        return [e["type"] for e in events]

    one, two, three, four = turns
    assert kinds(one) == ["llm_request", "llm_response", "error"] * 3 + ["error", "turn_complete"]
    assert "Unknown tool 'submit'" in one[2]["data"]["message"]
    assert "output token limit" in one[8]["data"]["message"]
    assert one[-2]["data"]["exit_status"] == "RepeatedFormatError"
    assert one[-1]["data"] == {"response": "", "done": False}
    assert kinds(two) == [
        "llm_request",
        "llm_response",
        "tool_call",
        "tool_result",
        "turn_complete",
    ]
    assert two[2]["data"] == {"tool_name": "bash", "arguments": {"command": submit}}
    assert two[-1]["data"] == {"response": "the result\n", "done": True}
    assert kinds(three)[-2:] == ["error", "turn_complete"]
    assert kinds(three).count("tool_call") == 3
    assert three[-2]["data"]["message"] == "no answer within 3 steps"
    assert three[-1]["data"] == {"response": "", "done": False}
    assert four[-1]["data"] == {"response": "All done.", "done": False}

    # mini-swe-agent's prompts: its system template with the environment's tools added, and
    # its instance template around the first message.
    system, first = requests[0]
    assert system["role"] == "system" and "openenv-tool NAME" in system["content"]
    assert "- env_bash: Run a command in the environment." in system["content"]
    assert first["role"] == "user" and first["content"].startswith("Please solve this issue: hello")
    # The format errors went back to the model, as mini-swe-agent words them.
    assert "Unknown tool 'submit'" in requests[1][-1]["content"]
    # The submitting command's output is in the conversation, and no exit bookkeeping is.
    last = requests[-1]
    assert not [m for m in last if m["role"] not in ("system", "user", "assistant", "tool")]
    assert any(m["role"] == "tool" and "the result" in m["content"] for m in last)
    assert [m["content"] for m in last if m["role"] == "user"][-3:] == ["go on", "more", "answer"]


@pytest.mark.slow
@needs_mini
def test_mini_swe_agent_model_failure_is_an_infrastructure_error(tmp_path: Path) -> None:
    with ModelStandIn([]) as model:  # an exhausted script answers HTTP 500
        config = HarnessConfig(name="m", model_url=model.url, startup_timeout_s=120)
        adapter = MiniSweAgentAdapter(config, model_attempts=1)

        async def go() -> None:
            await adapter.start(str(tmp_path))
            try:
                with pytest.raises(HarnessError, match="mini-swe-agent failed"):
                    await adapter.send_message("hello")
            finally:
                await adapter.stop()

        asyncio.run(go())
    assert _agent_processes() == []


@pytest.mark.slow
@needs_mini
def test_mini_swe_agent_turn_timeout_stops_everything(tmp_path: Path) -> None:
    release = threading.Event()

    def stuck_model(request: Any) -> ScriptedReply:
        release.wait(60)  # a model that does not answer within the turn's time
        return ScriptedReply(text="too late")

    with ModelStandIn(stuck_model) as model:
        config = HarnessConfig(
            name="m", model_url=model.url, startup_timeout_s=120, session_timeout_s=3
        )
        adapter = MiniSweAgentAdapter(config)

        async def go() -> None:
            await adapter.start(str(tmp_path))
            try:
                with pytest.raises(HarnessTurnTimeoutError):
                    await adapter.send_message("hello")
                assert not await adapter.is_alive()
            finally:
                release.set()
                await adapter.stop()

        asyncio.run(go())
    assert _agent_processes() == []


# -- Claude Code -------------------------------------------------------------------------------

CLAUDE = find_claude()
needs_claude = pytest.mark.skipif(
    CLAUDE is None,
    reason="Claude Code is not installed (npm install --prefix "
    "~/.cache/openenv-tests/claude-code @anthropic-ai/claude-code; .ci/run does)",
)


@pytest.mark.slow
@needs_git
@needs_claude
def test_claude_code_fixes_the_repo_over_two_turns(repo: Any) -> None:
    backend = choose_backend(None)
    inside = "/workspace" if backend == "bubblewrap" else str(_workspace(repo))
    path = f"{inside}/{SOURCE}"
    script = [
        ScriptedReply(tool_calls=[{"name": "Read", "arguments": {"file_path": path}}]),
        ScriptedReply(text="toRoman lets non-integers through."),
        # Edit works only on a file read earlier in the session: the resumed session has it.
        ScriptedReply(
            tool_calls=[
                {
                    "name": "Edit",
                    "arguments": {"file_path": path, "old_string": BUGGY, "new_string": FIXED},
                }
            ]
        ),
        ScriptedReply(tool_calls=[{"name": "mcp__env__submit", "arguments": {}}]),
        ScriptedReply(text="Fixed and submitted."),
    ]
    with _model_behind_capture(script) as (model, capture):
        config = HarnessConfig(
            name="claude-code",
            working_directory=str(_workspace(repo)),
            model_url=capture.url,
            api_key_env_var="CAPTURE_SESSION",
            env_vars={"CAPTURE_SESSION": SESSION},
            model="standin",
            session_timeout_s=300,
        )
        # The URL already is a recording proxy (the test's own): no second one in front of it.
        harness = HarnessEnvironment(
            ClaudeCodeAdapter(config), mcp=repo.mcp_server, capture_model_calls=False
        )
        try:
            one, two = _run_two_turns(
                harness, "What is wrong with toRoman?", "Fix it, then submit."
            )
        finally:
            harness.close()
        requests = model.requests
        calls = capture.drain(SESSION)

    assert one.metadata["response"] == "toRoman lets non-integers through."
    assert [c["tool_name"] for c in _tool_calls(one)] == ["Read"]
    assert [c["tool_name"] for c in _tool_calls(two)] == ["Edit", "mcp__env__submit"]
    results = [e["data"] for e in two.metadata["turn_events"] if e["type"] == "tool_result"]
    assert all(r["error"] is None for r in results), results
    assert two.metadata["response"] == "Fixed and submitted."
    assert FIXED in (_workspace(repo) / SOURCE).read_text()
    assert _grade(repo)["reward"] == 1.0
    # Context kept: the resumed session sends the first turn's exchange again.
    texts = json.dumps(requests[2].body["messages"])
    assert "toRoman lets non-integers through." in texts
    # The environment's tools were offered to the model through the bridge.
    assert "mcp__env__submit" in {t["name"] for t in requests[0].body.get("tools", [])}
    assert len(calls) == len(script)
    assert all(c.dialect == "anthropic" and c.error is None for c in calls)
    assert _agent_processes() == []
    # Claude Code's own state stayed out of the repository.
    assert not (_workspace(repo) / ".claude").exists()


@pytest.mark.slow
@needs_claude
def test_claude_code_model_failure_is_an_infrastructure_error(tmp_path: Path) -> None:
    with ModelStandIn([]) as model:  # an exhausted script answers HTTP 500
        config = HarnessConfig(name="claude-code", model_url=model.url, model="standin")
        adapter = ClaudeCodeAdapter(config, model_attempts=1)

        async def go() -> None:
            await adapter.start(str(tmp_path))
            try:
                with pytest.raises(HarnessError, match="model call failed"):
                    await adapter.send_message("hello")
            finally:
                await adapter.stop()

        asyncio.run(go())
        assert len(model.requests) == 1
    assert _agent_processes() == []


@pytest.mark.slow
@needs_claude
def test_claude_code_overlong_answer_ends_the_turn_not_the_episode(tmp_path: Path) -> None:
    """A reply stopped at its token limit is what the model said: Claude Code gives up on it,
    and the turn ends with an error event, not an infrastructure failure; the next turn runs."""

    def reply(request: Any) -> ScriptedReply:
        # Every call of the first turn runs into the limit (Claude Code may ask again).
        said = json.dumps(request.body.get("messages"))
        if "Say a little." in said:
            return ScriptedReply(text="Short this time.")
        return ScriptedReply(text="words " * 20, stop_reason="max_tokens")

    with ModelStandIn(reply) as model:
        config = HarnessConfig(name="claude-code", model_url=model.url, model="standin")
        adapter = ClaudeCodeAdapter(config, model_attempts=1)

        async def go() -> tuple[Any, Any]:
            await adapter.start(str(tmp_path))
            try:
                first = await adapter.send_message("Say a lot.")
                second = await adapter.send_message("Say a little.")
            finally:
                await adapter.stop()
            return first, second

        first, second = asyncio.run(go())
    errors = [e.data["message"] for e in first.events if e.type == "error"]
    assert errors and "output token maximum" in errors[0]
    assert first.response == "" and not first.done
    assert second.response == "Short this time."
    assert _agent_processes() == []


@pytest.mark.slow
@needs_git
@needs_mini
def test_the_docs_worked_example_runs() -> None:
    """docs/harness.md's worked example, as written, gives the reward it promises."""
    text = (Path(__file__).parents[2] / "docs" / "harness.md").read_text()
    start = text.index("```python\n", text.index("## Worked example")) + len("```python\n")
    code = text[start : text.index("```", start)]
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "model calls recorded: 5" in result.stdout
    assert "reward: 1.0" in result.stdout


@pytest.mark.slow
@needs_mini
def test_mini_swe_agent_black_box_rollouts_for_a_trainer(tmp_path: Path) -> None:
    """`build_harness_rollout_func` with no model step: the real agent plays each episode on
    the session's tools, and the rollout carries the environment's reward and the model calls
    the recording proxy saw (token ids included, as the stand-in returns them)."""
    from openenv.core.harness import AgentHarnessAdapter, build_harness_rollout_func

    from .test_blackbox import Factory

    script = [
        ScriptedReply(
            tool_calls=[
                {"name": "bash", "arguments": {"command": 'openenv-tool add \'{"a": 2, "b": 3}\''}}
            ],
            token_ids=[11, 12],
            logprobs=[-0.5, -0.25],
        ),
        ScriptedReply(text="The sum is 5.", token_ids=[13], logprobs=[-0.125]),
    ]
    factory = Factory()
    with ModelStandIn(script) as model:

        def agent() -> MiniSweAgentAdapter:
            config = HarnessConfig(
                name="mini-swe-agent",
                working_directory=str(tmp_path),
                model_url=model.url,
                model="standin",
                startup_timeout_s=120,
                session_timeout_s=300,
            )
            return MiniSweAgentAdapter(config)

        rollout = build_harness_rollout_func(
            session_factory=factory, harness_adapter=AgentHarnessAdapter(agent)
        )
        out = rollout(["Add 2 and 3 with the add tool."], None)

    assert out["infra_failed"] == [False], out["rollout_errors"]
    assert out["env_reward"] == [1.0]
    assert factory.sessions[0].calls == [{"a": 2, "b": 3}]
    assert out["completion_ids"] == [[11, 12, 13]]
    assert out["logprobs"] == [[-0.5, -0.25, -0.125]]
    assert _agent_processes() == []
