"""The shipped tasks: their patches, their grading (the reference fix scores 1, the repository
as given 0) and the generator that made them."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator

import pytest

from openenv.sandbox import Sandbox
from repo_env.make_tasks import PROJECTS, find_mutations, make_project_tasks
from repo_env.server.repo_environment import RepoEnvironment
from repo_env.tasks import TASKS_FILE, PatchError, apply_patch, load_catalog, project_files
from repo_env.testrun import run_pytest

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="repo_env needs git")

CATALOG = load_catalog()
TASK_IDS = sorted(CATALOG.tasks)


@pytest.fixture(scope="module")
def grader() -> Iterator[RepoEnvironment]:
    env = RepoEnvironment()
    yield env
    env.close()


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_the_patch_is_one_change_that_reverses_exactly(task_id: str) -> None:
    task = CATALOG.tasks[task_id]
    original = project_files(task.project)[task.path].decode()
    buggy = apply_patch(original, task.patch)
    assert buggy != original
    assert apply_patch(buggy, task.patch, reverse=True) == original
    assert task.patch.count("\n-") - task.patch.count("\n---") >= 1
    with pytest.raises(PatchError):
        apply_patch(buggy, task.patch)  # its context is gone once applied


def test_mutations_are_exact_byte_spans() -> None:
    """Each mutation changes only its own text, also after a non-ASCII character (ast columns
    count UTF-8 bytes), and keeps the file valid Python."""
    source = (
        "def pick(items, limit):\n"
        "    if len(items) < limit and limit:\n"
        "        return items[1:]\n"
        "    return 'é' + str(limit - 1)\n"
    ).encode()
    mutations = find_mutations("m.py", source)
    variants = [m.apply(source).decode() for m in mutations]
    for expected in (
        "    if len(items) <= limit and limit:\n",
        "    if len(items) < limit or limit:\n",
        "    if not (len(items) < limit and limit):\n",
        "    if len(items) < limit and limit:\n        pass\n    return",
        "        return items[2:]\n",
        "    return 'é' + str(limit + 1)\n",
        "    return 'é' + str(limit - 0)\n",
    ):
        assert any(expected in variant for variant in variants), expected
    assert {m.kind for m in mutations} == {
        "comparison",
        "boolean",
        "negated_condition",
        "removed_branch",
        "off_by_one",
        "arithmetic",
    }
    for variant in variants:
        compile(variant, "m.py", "exec")


@pytest.mark.slow
@pytest.mark.parametrize("task_id", TASK_IDS)
def test_the_reference_fix_scores_one_and_the_bug_zero(
    task_id: str, grader: RepoEnvironment
) -> None:
    task = CATALOG.tasks[task_id]
    grader.reset(task_id=task_id)
    workspace = grader._box
    assert workspace is not None
    untouched = grader.grade(task, workspace)
    assert untouched["reward"] == 0.0 and untouched["fail_to_pass"]["passed"] == 0
    assert untouched["pass_to_pass"]["failing"] == []
    buggy = workspace.read_file(task.path).decode()
    workspace.write_file(task.path, apply_patch(buggy, task.patch, reverse=True))
    fixed = grader.grade(task, workspace)
    assert fixed["reward"] == 1.0 and fixed["resolved"], fixed


@pytest.mark.slow
@pytest.mark.parametrize("project", [p[0] for p in PROJECTS])
def test_the_generator_reproduces_each_project_s_first_task(project: str) -> None:
    # The first task of each project, end to end from the same seed; `python -m
    # repo_env.make_tasks --check` reproduces the whole file (some 200 suite runs: minutes).
    shipped = json.loads(TASKS_FILE.read_text(encoding="utf-8"))
    name, version, _, source_dirs, _ = next(p for p in PROJECTS if p[0] == project)
    tests, tasks = make_project_tasks(name, version, source_dirs, shipped["seed"], 1)
    assert tests == next(p["tests"] for p in shipped["projects"] if p["name"] == name)
    assert tasks == [t for t in shipped["tasks"] if t["project"] == name][:1]


@pytest.mark.slow
def test_the_vendored_suites_pass_unmodified() -> None:
    with Sandbox() as box:
        for name, project in CATALOG.projects.items():
            box.clear_workspace()
            for path, content in project_files(name).items():
                box.write_file(path, content)
            run = run_pytest(box)
            assert sorted(run.outcomes) == list(project.tests), name
            assert all(run.passed(t) for t in project.tests), run.output


def test_an_edit_of_the_same_size_within_a_second_is_seen() -> None:
    # A cached .pyc is trusted by the source's mtime in whole seconds and its size: an agent's
    # quick one-character fix must not be judged on the old code.
    with Sandbox() as box:
        box.write_file("pytest.ini", "[pytest]\n")
        box.write_file("mod.py", "def f():\n    return 1\n")
        box.write_file("test_mod.py", "from mod import f\n\ndef test_f():\n    assert f() == 2\n")
        assert not run_pytest(box).passed("test_mod.py::test_f")
        stamp = box.host_path("mod.py").stat()
        box.write_file("mod.py", "def f():\n    return 2\n")
        os.utime(box.host_path("mod.py"), ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        assert run_pytest(box).passed("test_mod.py::test_f")
