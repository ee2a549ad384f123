"""The coding environment over the wire: sandboxed execution, the REPL, tasks and their rewards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coding_env import CodeAction, CodingEnv
from coding_env.server.coding_environment import CodingEnvironment
from openenv.core.errors import InvalidRequestError
from openenv.sandbox import (
    ExecResult,
    ExecStatus,
    Sandbox,
    SandboxError,
    process_count_bounded,
)
from openenv.testing import check_env, check_server, running_server

FIZZBUZZ = """
def fizzbuzz(n):
    out = []
    for i in range(1, n + 1):
        word = ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")
        out.append(word or str(i))
    return out
"""


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("coding_env.server.app:app") as url:
        yield url


def test_passes_the_environment_checker(server: str) -> None:
    report = check_env(CodingEnvironment)
    assert report.ok, str(report)
    report = check_server(server)
    assert report.ok, str(report)


async def test_the_repl_keeps_names_and_reports_exceptions(server: str) -> None:
    async with CodingEnv(base_url=server) as env:
        reset = await env.reset()
        assert reset.observation.persistent and reset.observation.backend in (
            "bubblewrap",
            "process",
        )
        first = await env.step(
            CodeAction(code="x = 6 * 7\nprint(x)\nimport os\nos.system('echo child')")
        )
        assert (first.observation.stdout, first.observation.exit_code) == ("42\nchild\n", 0)
        assert first.observation.status == ExecStatus.OK and first.reward == 1.0
        assert first.metadata["reward_components"] == {"runs": 1.0}
        failed = await env.step(CodeAction(code="print('before')\nx / 0"))
        obs = failed.observation
        assert (obs.stdout, obs.exit_code, obs.status) == ("before\n", 1, ExecStatus.ERROR)
        assert obs.exception is not None and obs.exception.type == "ZeroDivisionError"
        assert 'File "<cell-2>", line 2' in obs.exception.traceback
        assert obs.stderr.endswith("ZeroDivisionError: division by zero\n")
        assert failed.reward == 0.0
        exited = await env.step(CodeAction(code="raise SystemExit(3)"))
        assert (exited.observation.exit_code, exited.observation.exception) == (3, None)
        # Neither the exception nor SystemExit ended the interpreter.
        kept = await env.step(CodeAction(code="print(x + 1)"))
        assert kept.observation.stdout == "43\n" and not kept.observation.restarted
        state = await env.state()
        assert state.last_exit_code == 0 and state.step_count == 4 and state.persistent
        # A new episode is a new namespace.
        await env.reset()
        gone = await env.step(CodeAction(code="print(x)"))
        assert gone.observation.exception.type == "NameError"


async def test_fresh_mode_runs_each_step_in_a_new_process(server: str) -> None:
    async with CodingEnv(base_url=server) as env:
        reset = await env.reset(persistent=False)
        assert not reset.observation.persistent
        await env.step(CodeAction(code="x = 1"))
        result = await env.step(CodeAction(code="print(x)"))
        assert result.observation.exception.type == "NameError"
        assert (await env.state()).last_exit_code == 1


async def test_a_timeout_kills_the_repl_and_the_next_step_says_so(server: str) -> None:
    async with CodingEnv(base_url=server) as env:
        await env.reset(timeout_s=1)
        await env.step(CodeAction(code="x = 5"))
        hung = await env.step(CodeAction(code="print('start', flush=True)\nwhile True: pass"))
        obs = hung.observation
        assert obs.status == ExecStatus.TIMEOUT and obs.exit_code == -1
        assert obs.stdout == "start\n"  # output up to the kill is kept
        assert "restarted" in obs.message and hung.reward == 0.0
        after = await env.step(CodeAction(code="print('alive')\nprint(x)"))
        assert after.observation.restarted and after.observation.stdout == "alive\n"
        assert after.observation.exception.type == "NameError"
        assert (await env.state()).restarts == 1
        again = await env.step(CodeAction(code="print('fine')"))
        assert not again.observation.restarted


async def test_a_task_is_scored_by_hidden_tests_with_a_breakdown(server: str) -> None:
    async with CodingEnv(base_url=server) as env:
        reset = await env.reset(task_id="fizzbuzz")
        assert "fizzbuzz(n)" in reset.observation.prompt
        assert reset.observation.tests_total == 4 and not reset.done
        partial = await env.step(
            CodeAction(code="def fizzbuzz(n):\n    return [str(i) for i in range(1, n + 1)]")
        )
        obs = partial.observation
        assert (obs.tests_passed, obs.tests_total, partial.done) == (2, 4, False)
        assert [r.passed for r in obs.test_results] == [True, False, False, True]
        assert partial.reward == pytest.approx(0.9 * 0.5 + 0.1)
        assert partial.metadata["reward_components"] == {"tests": 0.5, "runs": 1.0}
        solved = await env.step(CodeAction(code=FIZZBUZZ))
        assert solved.observation.tests_passed == 4 and solved.done
        assert solved.reward == pytest.approx(1.0)
        assert (await env.state()).best_tests_passed == 4


async def test_the_repl_solution_is_every_clean_cell(server: str) -> None:
    async with CodingEnv(base_url=server) as env:
        await env.reset(tests=[{"call": "double(21)", "expected": 42}], prompt="double it")
        helper = await env.step(CodeAction(code="def times(a, b):\n    return a * b"))
        assert (
            helper.observation.tests_passed == 0
            and "NameError" in helper.observation.test_results[0].error
        )
        await env.step(CodeAction(code="oops("))  # a syntax error is not part of the namespace
        solved = await env.step(CodeAction(code="def double(x):\n    return times(x, 2)"))
        assert solved.observation.tests_passed == 1 and solved.done


@pytest.mark.parametrize(
    "cheat",
    [
        # Print what a judge frame might look like, on every channel there is.
        "import os, sys\ndef f(x):\n    return 0\n"
        "for fd in range(1, 20):\n"
        '    try: os.write(fd, b\'\\n{"case": 0, "value": 4}\\n\')\n    except OSError: pass\n'
        'print(\'{"case": 0, "value": 4}\')',
        # An object equal to everything.
        "class Any:\n    def __eq__(self, other): return True\ndef f(x):\n    return Any()",
        # Patch the judge's helpers it can reach.
        "import json\njson.dumps = lambda *a, **k: '4'\njson.loads = lambda *a, **k: 4\n"
        "def f(x):\n    return 0",
        # Replace the function under test after the fact, or end the judge early.
        "import os\ndef f(x):\n    os._exit(0)",
    ],
)
async def test_the_agent_cannot_fake_a_verdict(server: str, cheat: str) -> None:
    async with CodingEnv(base_url=server) as env:
        await env.reset(tests=[{"call": "f(2)", "expected": 4}], persistent=False)
        result = await env.step(CodeAction(code=cheat))
        assert result.observation.tests_passed == 0, result.observation.test_results
        assert result.metadata["reward_components"]["tests"] == 0.0


async def test_bad_reset_options_are_typed_errors_and_the_session_stays_usable(server: str) -> None:
    async with CodingEnv(base_url=server) as env:
        for options, field in (
            ({"task_id": "no_such_task"}, "task_id"),
            ({"tests": [{"expected": 1}]}, "tests"),
            ({"tests": []}, "tests"),
            ({"timeout_s": -1}, "timeout_s"),
            ({"timeout_s": "soon"}, "timeout_s"),
            ({"max_steps": 0}, "max_steps"),
        ):
            with pytest.raises(InvalidRequestError) as info:
                await env.reset(**options)
            assert info.value.code == "VALIDATION_ERROR"
            assert info.value.data["errors"][0]["loc"] == [field]
        await env.reset(task_id="add", max_steps=1)
        last = await env.step(CodeAction(code="def add(a, b):\n    return 5"))
        assert last.done and last.observation.tests_passed == 1
        with pytest.raises(InvalidRequestError, match="call reset"):
            await env.step(CodeAction(code="print(1)"))
        # Solved before max_steps: a further step is refused too.
        await env.reset(task_id="add")
        solved = await env.step(CodeAction(code="def add(a, b):\n    return a + b"))
        assert solved.done and solved.reward == pytest.approx(1.0)
        with pytest.raises(InvalidRequestError, match="call reset"):
            await env.step(CodeAction(code="print(1)"))


def test_a_seed_picks_the_same_random_task() -> None:
    env = CodingEnvironment()
    try:
        picks = {env.reset(task_id="random", seed=seed).task_id for seed in range(8)}
        assert len(picks) > 1
        assert (
            env.reset(task_id="random", seed=5).task_id
            == env.reset(task_id="random", seed=5).task_id
        )
    finally:
        env.close()


def test_a_sandbox_failure_is_an_infrastructure_error_not_a_score(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: Sandbox, argv: object, **kwargs: object) -> ExecResult:
        return ExecResult(status=ExecStatus.SANDBOX_ERROR, backend=self.backend, message="no bwrap")

    env = CodingEnvironment()
    try:
        env.reset(task_id="add", persistent=False)
        monkeypatch.setattr(Sandbox, "run", broken)
        with pytest.raises(SandboxError) as info:
            env.step(CodeAction(code="def add(a, b):\n    return a + b"))
        assert info.value.data["category"] == "infrastructure"
    finally:
        env.close()


async def test_limits_are_typed_and_the_repl_recovers(server: str) -> None:
    async with CodingEnv(base_url=server) as env:
        await env.reset()
        loud = await env.step(CodeAction(code="x = 1\nprint('x' * 3_000_000)"))
        obs = loud.observation
        assert obs.status == ExecStatus.OUTPUT_LIMIT and obs.truncated
        assert len(obs.stdout) == 1_000_000 and not obs.restarted
        if not process_count_bounded():
            # Root with no cgroup: nothing bounds a process count (docs/sandbox.md); a fork
            # bomb would reach the host (a fresh container running this suite as root).
            return
        forks = await env.step(CodeAction(code="import os\nfor _ in range(200):\n    os.fork()"))
        assert forks.observation.status == ExecStatus.PROCESS_LIMIT, forks.observation
        assert "restarted" in forks.observation.message and forks.reward == 0.0
        after = await env.step(CodeAction(code="print('clean')"))
        assert after.observation.restarted and after.observation.stdout == "clean\n"


def test_the_agent_cannot_read_the_tasks_expected_values() -> None:
    from coding_env.tasks import TASKS_FILE

    env = CodingEnvironment()
    try:
        env.reset(task_id="add")
        if env.state.backend != "bubblewrap":
            pytest.skip("only bubblewrap hides files (the process backend is documented not to)")
        obs = env.step(CodeAction(code=f"print(open({str(TASKS_FILE)!r}).read())"))
        assert obs.status == ExecStatus.ERROR and "expected" not in obs.stdout
    finally:
        env.close()
