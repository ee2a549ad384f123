"""Every shipped task: its reference solution scores 1 and the untouched workspace scores 0.
The task loader: both layouts, and clear errors for folders that follow neither.

A few tasks run by default; all of them (about 20 s) with `-m slow`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from terminal_env import TerminalAction
from terminal_env.server.terminal_environment import TerminalEnvironment
from terminal_env.tasks import BUILTIN_TASKS, TaskFormatError, load_task, load_tasks

SHIPPED = load_tasks([BUILTIN_TASKS])
#: One per kind of task, run by default.
FAST = {"create-greeting", "git-first-commit", "tb-hello-script"}


@pytest.fixture(scope="module")
def env() -> Iterator[TerminalEnvironment]:
    environment = TerminalEnvironment()
    yield environment
    environment.close()


def test_the_shipped_tasks() -> None:
    assert len(SHIPPED) >= 20
    categories = {task.spec.category for task in SHIPPED.values()}
    assert {"files", "text", "build", "git"} <= categories
    assert all(task.solution is not None for task in SHIPPED.values())
    layouts = {task.layout for task in SHIPPED.values()}
    assert layouts == {"native", "terminal-bench"}


@pytest.mark.parametrize(
    "task_id",
    [tid if tid in FAST else pytest.param(tid, marks=pytest.mark.slow) for tid in SHIPPED],
)
def test_reference_solution_scores_1_and_untouched_workspace_0(
    env: TerminalEnvironment, task_id: str
) -> None:
    task = SHIPPED[task_id]
    if task_id in env.unavailable:
        pytest.skip(f"{task_id} needs {env.unavailable[task_id]}")
    env.reset(task_id=task_id)
    untouched = env.step(TerminalAction(submit=True))
    assert untouched.reward == 0.0, untouched.metadata["verification"]
    env.reset(task_id=task_id)
    assert task.solution is not None
    solved = env.step(TerminalAction(command=task.solution.read_text(), submit=True))
    assert solved.reward == 1.0, (solved.output, solved.metadata["verification"])


def test_terminal_bench_fields_map_onto_ours() -> None:
    task = SHIPPED["tb-hello-script"]
    assert task.layout == "terminal-bench" and task.verifier == "run-tests.sh"
    assert task.spec.difficulty == "easy" and task.spec.category == "software-engineering"
    assert task.spec.verify_timeout_s == 60.0 and task.spec.tags == ["python", "bash"]
    assert task.spec.instruction.startswith("Write a Python script hello.py")


def test_a_terminal_bench_task_without_run_tests_uses_pytest(
    make_task: Callable[..., Path], tasks_dir: Path
) -> None:
    make_task(
        "tb-pytest",
        {
            "task.yaml": """
                instruction: Create done.txt.
                difficulty: easy
                parser_name: pytest
                max_test_timeout_sec: 30
            """,
            "tests/test_outputs.py": """
                import os

                def test_done():
                    assert os.path.exists("done.txt")
            """,
            "solution.sh": "touch done.txt\n",
        },
    )
    env = TerminalEnvironment(tasks_dirs=[tasks_dir])
    try:
        task = env.tasks["tb-pytest"]
        assert task.verifier == "pytest"
        if "tb-pytest" in env.unavailable:
            pytest.skip("pytest is not installed")
        env.reset(task_id="tb-pytest")
        failed = env.step(TerminalAction(submit=True))
        assert failed.reward == 0.0
        assert list(failed.metadata["verification"]["checks"].values()) == [False]
        env.reset(task_id="tb-pytest")
        done = env.step(TerminalAction(command="touch done.txt", submit=True))
        assert done.reward == 1.0
        assert done.metadata["verification"]["checks"] == {"test_outputs.py::test_done": True}
    finally:
        env.close()


@pytest.mark.parametrize(
    ("files", "error"),
    [
        ({"verify.sh": "exit 0\n"}, "no task.yaml"),
        ({"task.yaml": "instruction: x\n"}, "no verifier"),
        ({"task.yaml": "instruction: x\n", "verify.sh": "", "verify.py": ""}, "keep one"),
        ({"task.yaml": "instruction: x\nmax_step: 3\n", "verify.sh": ""}, "max_step"),
        ({"task.yaml": "instruction: x\ndifficulty: extreme\n", "verify.sh": ""}, "difficulty"),
        ({"task.yaml": "- a list\n", "verify.sh": ""}, "mapping"),
        ({"task.yaml": "instruction: x\nid: 'no spaces'\n", "verify.sh": ""}, "id"),
        ({"task.yaml": "instruction: x\nsurprise: 1\n", "run-tests.sh": ""}, "surprise"),
    ],
)
def test_malformed_tasks_are_named(
    make_task: Callable[..., Path], files: dict[str, str], error: str
) -> None:
    folder = make_task("bad", files)
    with pytest.raises(TaskFormatError, match=error):
        load_task(folder)


def test_duplicate_ids_and_extra_roots(make_task: Callable[..., Path], tasks_dir: Path) -> None:
    make_task("create-greeting", {"task.yaml": "instruction: x\n", "verify.sh": ""})
    with pytest.raises(TaskFormatError, match="create-greeting"):
        load_tasks([BUILTIN_TASKS, tasks_dir])
    make_task("create-greeting", {"task.yaml": "instruction: x\nid: mine\n", "verify.sh": ""})
    assert "mine" in load_tasks([BUILTIN_TASKS, tasks_dir])


def test_tasks_that_run_what_they_build_need_an_exec_workspace() -> None:
    # Docker's default --tmpfs /tmp is noexec: such tasks are unavailable there, not failed.
    needing = {tid for tid, task in SHIPPED.items() if task.spec.needs_exec}
    assert needing == {"c-program-makefile"}
    reasons = SHIPPED["c-program-makefile"].missing(workspace_noexec=True)
    assert any("noexec" in reason for reason in reasons)
    assert SHIPPED["make-scripts-executable"].missing(workspace_noexec=True) == []
