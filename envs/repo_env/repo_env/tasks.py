"""The shipped tasks: small real Python projects (vendored under data/projects) and, for each
task, the bug injected into one of them (a unified diff) and the tests that catch it.

`data/tasks.json` is written by `python -m repo_env.make_tasks`; do not edit it by hand.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
PROJECTS_DIR = DATA / "projects"
TASKS_FILE = DATA / "tasks.json"
#: Never part of a project snapshot (left by a local test run of the vendored suites).
_SKIPPED_PARTS = {"__pycache__", ".pytest_cache"}


@dataclass(frozen=True)
class Project:
    name: str
    version: str
    license: str
    #: Folders (relative to the repository root) holding the project's own code: what an agent
    #: is meant to fix and what grading takes from its workspace. Everything else is pristine.
    source_dirs: tuple[str, ...]
    #: Every test of the unmodified project (node ids), all passing.
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Task:
    task_id: str
    project: str
    #: The file the bug is in, the function, and what the mutation did (for people, not agents).
    path: str
    function: str
    mutation: str
    #: A unified diff from the project to the buggy repository; reversed, it is the fix.
    patch: str
    #: Tests that fail with the bug and pass without it (SWE-bench's FAIL_TO_PASS).
    fail_to_pass: tuple[str, ...]
    instruction: str


@dataclass(frozen=True)
class Catalog:
    projects: dict[str, Project]
    tasks: dict[str, Task]

    def pass_to_pass(self, task: Task) -> tuple[str, ...]:
        """The project's other tests, which pass with and without the bug (PASS_TO_PASS)."""
        failing = set(task.fail_to_pass)
        return tuple(t for t in self.projects[task.project].tests if t not in failing)


@functools.lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    data = json.loads(TASKS_FILE.read_text(encoding="utf-8"))
    projects = {
        p["name"]: Project(
            name=p["name"],
            version=p["version"],
            license=p["license"],
            source_dirs=tuple(p["source_dirs"]),
            tests=tuple(p["tests"]),
        )
        for p in data["projects"]
    }
    tasks = {
        t["task_id"]: Task(
            task_id=t["task_id"],
            project=t["project"],
            path=t["path"],
            function=t["function"],
            mutation=t["mutation"],
            patch=t["patch"],
            fail_to_pass=tuple(t["fail_to_pass"]),
            instruction=t["instruction"],
        )
        for t in data["tasks"]
    }
    return Catalog(projects=projects, tasks=tasks)


@functools.cache
def project_files(name: str) -> dict[str, bytes]:
    """The project's files by repository path (posix), as vendored."""
    root = PROJECTS_DIR / name
    if not root.is_dir():
        raise KeyError(f"no vendored project {name!r}")
    files = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and not _SKIPPED_PARTS.intersection(relative.parts):
            files[relative.as_posix()] = path.read_bytes()
    return files


@functools.cache
def task_files(task: Task) -> dict[str, bytes]:
    """The buggy repository of `task`: the project with the task's patch applied."""
    files = dict(project_files(task.project))
    original = files[task.path].decode("utf-8")
    files[task.path] = apply_patch(original, task.patch).encode("utf-8")
    return files


class PatchError(ValueError):
    """A patch does not apply (its context differs from the text)."""


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_patch(text: str, patch: str, *, reverse: bool = False) -> str:
    """Apply a single-file unified diff to `text` exactly (no fuzz); `reverse` undoes it."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    position = 0  # index in `lines` of the next line not yet copied
    remove, add = ("+", "-") if reverse else ("-", "+")
    patch_lines = patch.splitlines(keepends=True)
    i = 0
    while i < len(patch_lines):
        match = _HUNK.match(patch_lines[i])
        i += 1
        if not match:
            continue
        start = int(match.group(3) if reverse else match.group(1))
        start = start - 1 if start > 0 else 0
        if start < position:
            raise PatchError("hunks overlap or are out of order")
        out.extend(lines[position:start])
        position = start
        while i < len(patch_lines) and not patch_lines[i].startswith("@@"):
            line = patch_lines[i]
            i += 1
            tag, body = line[:1], line[1:]
            if tag in (" ", remove):
                if position >= len(lines) or lines[position] != body:
                    raise PatchError(f"the patch does not apply at line {position + 1}")
                position += 1
                if tag == " ":
                    out.append(body)
            elif tag == add:
                out.append(body)
            elif tag == "\\":
                continue  # "\ No newline at end of file"
            else:
                raise PatchError(f"unexpected patch line {line!r}")
    out.extend(lines[position:])
    return "".join(out)
