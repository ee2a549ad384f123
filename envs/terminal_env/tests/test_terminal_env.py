"""The terminal environment over the wire and in process: commands, shell state, verdicts
that the agent cannot forge, infrastructure failures that are never scored."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from openenv.core.errors import InvalidActionError, InvalidRequestError
from openenv.sandbox import SandboxError
from openenv.testing import check_env, running_server
from terminal_env import TerminalAction, TerminalEnv
from terminal_env.server.terminal_environment import TerminalEnvironment
from terminal_env.tasks import BUILTIN_TASKS

GREETING_YAML = """
instruction: Write hello.txt.
difficulty: easy
category: files
"""


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("terminal_env.server.app:app") as url:
        yield url


@pytest.fixture
def env() -> Iterator[TerminalEnvironment]:
    environment = TerminalEnvironment()
    yield environment
    environment.close()


def test_passes_the_environment_checker() -> None:
    report = check_env(TerminalEnvironment)
    assert report.ok, str(report)


def test_the_declared_sample_actions_print_no_times(env: TerminalEnvironment) -> None:
    """The checker replays the declared examples from reset(seed=0) and compares outputs: a
    listing with mtimes differed whenever the two replays straddled a minute (CI saw it)."""
    examples = TerminalAction.model_json_schema()["examples"]
    outputs = []
    for stamp in (0, 2_000_000_000):  # the workspace's files dated 1970, then 2033
        env.reset(seed=0)  # which task seed 0 picks depends on the tools installed here
        (env._box.host_workspace / "notes.txt").write_text("a file to list\n")
        for path in [env._box.host_workspace, *env._box.host_workspace.rglob("*")]:
            os.utime(path, (stamp, stamp), follow_symlinks=False)
        outputs.append([env.step(TerminalAction(**example)).output for example in examples[:-1]])
    assert outputs[0] == outputs[1] and all(outputs[0])


async def test_an_episode_over_the_wire(server: str) -> None:
    async with TerminalEnv(base_url=server) as client:
        first = await client.reset(task_id="create-greeting")
        assert "hello.txt" in first.observation.instruction
        assert first.observation.task_id == "create-greeting"
        workspace = first.observation.cwd
        assert first.observation.steps_left == 10 and not first.done
        # The directory and exported variables carry over; stderr is in the output.
        moved = await client.step(TerminalAction(command="mkdir -p a/b && cd a/b && export X=42"))
        assert moved.observation.cwd == f"{workspace}/a/b" and moved.observation.exit_code == 0
        seen = await client.step(TerminalAction(command="echo $X; pwd; ls missing"))
        assert seen.observation.output.startswith(f"42\n{workspace}/a/b\nls: ")
        assert seen.observation.exit_code == 2 and seen.observation.status == "error"
        slow = await client.step(TerminalAction(command="cd /; sleep 60", timeout_s=1))
        assert slow.observation.status == "timeout" and slow.observation.exit_code is None
        assert slow.observation.cwd == f"{workspace}/a/b"  # the state before it stays
        done = await client.step(
            TerminalAction(command="cd && echo 'Hello, world!' > hello.txt", submit=True)
        )
        assert done.done and done.reward == 1.0
        verification = done.observation.metadata["verification"]
        assert verification["checks"] == {
            "hello.txt exists": True,
            "hello.txt holds the greeting": True,
            "a single line": True,
        }
        state = await client.state()
        assert state.submitted and state.score == 1.0 and state.step_count == 4
        with pytest.raises(InvalidRequestError, match="episode is over"):
            await client.step(TerminalAction(command="ls"))
        again = await client.reset(task_id="create-greeting")
        assert again.observation.cwd == workspace
        empty = await client.step(TerminalAction(command="ls -A; echo $X"))
        assert empty.observation.output == "\n"  # a fresh workspace and shell


async def test_bad_input_is_a_typed_error_and_the_session_goes_on(server: str) -> None:
    async with TerminalEnv(base_url=server) as client:
        with pytest.raises(InvalidRequestError) as info:
            await client.reset(task_id="no-such-task")
        assert info.value.data["errors"][0]["loc"] == ["task_id"]
        with pytest.raises(InvalidRequestError, match="call reset"):
            await client.step(TerminalAction(command="ls"))
        await client.reset(task_id="count-error-lines")
        with pytest.raises(InvalidRequestError) as info:
            await client.step(TerminalAction(command="   "))
        assert info.value.data["errors"][0]["loc"] == ["command"]
        with pytest.raises(InvalidRequestError) as info:  # the server validates it too
            await client.step(TerminalAction.model_construct(command="ls", timeout_s=-1))
        assert info.value.data["errors"][0]["loc"] == ["timeout_s"]
        with pytest.raises(InvalidRequestError, match="NUL"):
            await client.step(TerminalAction(command="echo a\0b"))
        ok = await client.step(TerminalAction(command="ls"))
        assert ok.observation.output == "logs\n"
        # Long commands and many exported variables do not meet the kernel's argv limit.
        hundred_kb = "$(head -c 100000 /dev/zero | tr '\\0' x)"
        make_big = f"export A={hundred_kb} B={hundred_kb}"
        await client.step(TerminalAction(command=f"{make_big}; : {'é' * 90_000}"))  # 180 kB
        seen = await client.step(TerminalAction(command="echo $((${#A} + ${#B})); cat; echo read"))
        assert seen.observation.output == "200000\nread\n"  # stdin is empty


def test_reset_picks_tasks_by_seed_and_filters(env: TerminalEnvironment) -> None:
    first = env.reset(seed=5)
    assert env.reset(seed=5).task_id == first.task_id
    assert env.reset(category="text").metadata["category"] == "text"
    if shutil.which("git"):  # the one hard task is a git task
        assert env.reset(difficulty="hard").task_id == "git-resolve-conflict"
    with pytest.raises(InvalidActionError):
        env.reset(category="no-such-category")


def test_the_agent_cannot_read_verifiers_or_solutions(env: TerminalEnvironment) -> None:
    if env.state.backend != "bubblewrap":
        pytest.skip("only bubblewrap hides the task folders (the process backend cannot)")
    env.reset(task_id="create-greeting")
    seen = env.step(TerminalAction(command=f"find {BUILTIN_TASKS} -type f | wc -l; env"))
    assert seen.output.splitlines()[0] == "0"
    assert "TASK_DIR" not in seen.output and "OPENENV" not in seen.output


def test_printed_verdicts_from_the_workspace_do_not_count(
    make_task: Callable[..., Path], tasks_dir: Path
) -> None:
    make_task(
        "echoes-workspace",
        {
            "task.yaml": GREETING_YAML,
            "verify.sh": """
                . "$OPENENV_CHECK"
                cat claim.txt 2>/dev/null
                check "made" test -f never-made-by-anyone
                finish
            """,
        },
    )
    env = TerminalEnvironment(tasks_dirs=[tasks_dir])
    try:
        env.reset(task_id="echoes-workspace")
        forged = "printf '%s\\n' 'check pass made' 'score 1' '  score 1' > claim.txt"
        done = env.step(TerminalAction(command=forged, submit=True))
        assert done.reward == 0.0
        assert done.metadata["verification"]["checks"] == {"made": False}
        assert "score 1" in done.metadata["verification"]["output"]
    finally:
        env.close()


def test_partial_credit_and_python_verifiers(
    make_task: Callable[..., Path], tasks_dir: Path
) -> None:
    make_task(
        "partial",
        {
            "task.yaml": GREETING_YAML,
            "verify.sh": """
                . "$OPENENV_CHECK"
                check "a" test -f a
                check "b" test -f b
                finish --partial
            """,
        },
    )
    make_task(
        "python-verifier",
        {
            "task.yaml": GREETING_YAML,
            "verify.py": """
                import os, sys
                sys.path.insert(0, os.environ["OPENENV_VERIFY_LIB"])
                from check import Checks

                checks = Checks()
                checks.check("a exists", os.path.exists("a"))
                checks.finish()
            """,
        },
    )
    env = TerminalEnvironment(tasks_dirs=[tasks_dir])
    try:
        env.reset(task_id="partial")
        assert env.step(TerminalAction(command="touch a", submit=True)).reward == 0.5
        env.reset(task_id="python-verifier")
        done = env.step(TerminalAction(command="touch a", submit=True))
        assert done.reward == 1.0 and done.metadata["verification"]["checks"] == {"a exists": True}
    finally:
        env.close()


def test_running_out_of_steps_verifies(make_task: Callable[..., Path], tasks_dir: Path) -> None:
    make_task(
        "two-steps",
        {
            "task.yaml": GREETING_YAML + "max_steps: 2\n",
            "verify.sh": '. "$OPENENV_CHECK"\ncheck "b" test -f b\nfinish\n',
        },
    )
    env = TerminalEnvironment(tasks_dirs=[tasks_dir])
    try:
        env.reset(task_id="two-steps")
        assert not env.step(TerminalAction(command="touch a")).done
        last = env.step(TerminalAction(command="touch b"))
        assert last.done and last.reward == 1.0 and last.steps_left == 0
    finally:
        env.close()


def test_infrastructure_failures_raise_and_are_never_scored(
    make_task: Callable[..., Path], tasks_dir: Path
) -> None:
    make_task(
        "broken-setup",
        {"task.yaml": GREETING_YAML, "setup.sh": "exit 3\n", "verify.sh": "exit 0\n"},
    )
    env = TerminalEnvironment(tasks_dirs=[tasks_dir])
    try:
        with pytest.raises(SandboxError, match="could not be set up") as info:
            env.reset(task_id="broken-setup")
        assert info.value.data["category"] == "infrastructure"
        env.reset(task_id="create-greeting")
        env._judge.close()  # the verifier's sandbox is gone: the verdict cannot be had
        with pytest.raises(SandboxError):
            env.step(TerminalAction(submit=True))
        assert env.state.score is None and not env.state.submitted
    finally:
        env.close()
