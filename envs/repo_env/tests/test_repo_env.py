"""The repository environment over the wire (a real server, real WebSocket frames) and in
process: the tools, their refusals, grading from pristine tests, the step budget, and an
infrastructure failure that is raised, never scored."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator

import pytest

from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.errors import InvalidActionError, ServerError, ToolCallError
from openenv.sandbox import SandboxError
from openenv.testing import check_env, running_server
from repo_env import RepoEnv, RepoObservation
from repo_env.server.repo_environment import RepoEnvironment
from repo_env.tasks import load_catalog

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="repo_env needs git")

BUG = "if s != 'N' and special_case:"  # roman-2: fromRoman's special case, inverted
FIX = "if s == 'N' and special_case:"
SOURCE = "src/roman/__init__.py"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("repo_env.server.app:app") as url:
        yield url


def test_ships_at_least_ten_tasks_from_three_projects() -> None:
    catalog = load_catalog()
    assert len(catalog.tasks) >= 10
    assert set(catalog.projects) == {"inflection", "roman", "webcolors"}
    for task in catalog.tasks.values():
        assert task.fail_to_pass and catalog.pass_to_pass(task)
        assert task.fail_to_pass[0] in task.instruction


def test_fixing_the_bug_over_the_wire(server: str) -> None:
    with RepoEnv(base_url=server).sync() as env:
        result = env.reset(task_id="roman-2")
        obs = result.observation
        assert isinstance(obs, RepoObservation) and not result.done
        assert obs.task_id == "roman-2" and obs.project == "roman"
        assert SOURCE in obs.files and "submit" in obs.tool_names
        assert "tests/test_roman.py::TestRoman::test_fromRoman" in obs.instruction

        assert SOURCE in env.call_tool("list_files", path="src")
        hits = env.call_tool("search", pattern="and special_case:", path="src")
        assert hits == [f"{SOURCE}:117:    {BUG}"]
        assert env.call_tool("search", pattern=r"s [!=]= 'N'", regex=True) == hits
        assert env.call_tool("read_file", path=SOURCE, start_line=117, end_line=118) == (
            f"117\t    {BUG}\n118\t        return 0"
        )
        before = env.call_tool("run_tests")
        assert (before["passed"], before["failed"]) == (5, 4)
        assert "tests/test_roman.py::TestRoman::test_fromRoman" in before["failed_tests"]

        assert env.call_tool("edit_file", path=SOURCE, old=BUG, new=FIX).startswith("Edited")
        one = env.call_tool("run_tests", test_id="tests/test_roman.py::TestRoman::test_fromRoman")
        assert (one["passed"], one["failed"], one["status"]) == (1, 0, "ok")
        diff = env.call_tool("git_diff")
        assert f"-    {BUG}" in diff and f"+    {FIX}" in diff

        final = env.step(CallToolAction(tool_name="submit", arguments={}))
        assert final.done and final.reward == 1.0
        grade = final.observation.metadata["grade"]
        assert grade["resolved"] and grade["fail_to_pass"] == {
            "passed": 4,
            "total": 4,
            "failing": [],
        }
        assert f"+    {FIX}" in grade["git_diff"]
        assert env.state().grade["reward"] == 1.0

        with pytest.raises(ServerError, match="episode is over"):
            env.step(CallToolAction(tool_name="git_diff", arguments={}))
        # The session is still usable: a new episode starts from the buggy repository again.
        env.reset(task_id="roman-2")
        assert env.call_tool("git_diff") == ""


def test_bad_input_is_refused_and_the_session_goes_on(server: str) -> None:
    with RepoEnv(base_url=server).sync() as env:
        env.reset(task_id="roman-1")
        refusals = {
            "read_file": {"path": "../../etc/passwd"},
            "list_files": {"path": "/etc"},
            "write_file": {"path": ".git/config", "content": "[core]\n"},
            "edit_file": {"path": SOURCE, "old": "no such text", "new": "x"},
            "run_tests": {"test_id": "-p evil"},
            "search": {"pattern": "(", "regex": True},
        }
        for tool, arguments in refusals.items():
            with pytest.raises(ToolCallError) as refused:
                env.call_tool(tool, **arguments)
            assert refused.value.error_type == "invalid_args", tool
        with pytest.raises(ToolCallError, match="occurs 2 times"):
            env.call_tool("edit_file", path=SOURCE, old="return 0", new="return 1")
        with pytest.raises(ServerError, match="unknown task 'nope'"):
            env.reset(task_id="nope")
        assert env.call_tool("git_diff") == ""  # nothing was changed, the episode goes on


def test_changing_the_tests_does_not_help(server: str) -> None:
    """The agent makes its own suite pass by editing tests and adding a conftest.py; grading
    runs the pristine suite, so the bug still counts."""
    with RepoEnv(base_url=server).sync() as env:
        env.reset(task_id="roman-2")
        env.call_tool(
            "write_file", path="tests/test_roman.py", content="def test_ok():\n    pass\n"
        )
        hook = (
            "import pytest\n\n"
            "@pytest.hookimpl(hookwrapper=True)\n"
            "def pytest_runtest_makereport(item, call):\n"
            "    outcome = yield\n"
            "    outcome.get_result().outcome = 'passed'\n"
        )
        env.call_tool("write_file", path="conftest.py", content=hook)
        env.call_tool("write_file", path="src/conftest.py", content=hook)
        assert env.call_tool("run_tests")["failed"] == 0
        grade = env.call_tool("submit")
        assert grade["reward"] == 0.0 and not grade["resolved"]
        assert grade["fail_to_pass"]["passed"] == 0
        assert "conftest.py" in grade["git_diff"]


def test_the_step_budget_ends_and_grades_the_episode() -> None:
    env = RepoEnvironment()
    try:
        env.reset(task_id="roman-2", max_steps=2)
        first = env.step(
            CallToolAction(
                tool_name="edit_file", arguments={"path": SOURCE, "old": BUG, "new": FIX}
            )
        )
        assert not first.done and first.reward == 0.0
        last = env.step(CallToolAction(tool_name="git_diff", arguments={}))
        assert last.done and last.reward == 1.0
        assert env.state.grade is not None and env.state.grade["resolved"]
    finally:
        env.close()


def test_a_broken_sandbox_is_an_infrastructure_error_not_a_score() -> None:
    env = RepoEnvironment()
    try:
        env.reset(task_id="roman-2")
        assert env._box is not None
        env._box.close()  # the sandbox can no longer start commands
        with pytest.raises(SandboxError) as raised:
            asyncio.run(env.step_async(CallToolAction(tool_name="submit", arguments={})))
        assert raised.value.data["category"] == "infrastructure"
        assert env.state.grade is None
    finally:
        env.close()


def test_reset_options_are_checked() -> None:
    env = RepoEnvironment()
    try:
        for options in ({"task_id": "nope"}, {"max_steps": 0}, {"max_steps": "ten"}):
            with pytest.raises(InvalidActionError):
                env.reset(**options)
        same = [env.reset(seed=3).task_id for _ in range(2)]
        assert same[0] == same[1] in load_catalog().tasks
    finally:
        env.close()


@pytest.mark.slow
def test_passes_the_environment_checker() -> None:
    report = check_env(RepoEnvironment)
    assert report.ok, str(report)


def test_code_under_test_cannot_read_the_recorded_fixes(server: str) -> None:
    # The agent's code runs inside pytest; under bubblewrap the task catalog (with each bug's
    # patch) is hidden from it.
    from repo_env.tasks import TASKS_FILE

    with RepoEnv(base_url=server).sync() as env:
        env.reset(task_id="roman-2")
        if env.state().sandbox_backend != "bubblewrap":
            pytest.skip("only bubblewrap hides files (the process backend is documented not to)")
        probe = f"def test_probe():\n    open({str(TASKS_FILE)!r}).read()\n"
        env.call_tool("write_file", path="tests/test_probe.py", content=probe)
        report = env.call_tool("run_tests", test_id="tests/test_probe.py::test_probe")
        assert "FileNotFoundError" in str(report) or "PermissionError" in str(report), report
