"""Tasks as data: one folder each, in this project's format or Terminal-Bench's.

Native layout (see README.md, "Writing a task")::

    <id>/task.yaml      instruction, difficulty, category, limits, required tools
    <id>/files/         optional: copied into the empty workspace first
    <id>/setup.sh       optional: prepares the workspace (runs in the sandbox)
    <id>/verify.sh      or verify.py: decides the reward after the episode
    <id>/solution.sh    the reference solution (tests prove it scores 1)

Terminal-Bench layout: `task.yaml` (`instruction`, `difficulty`, `category`,
`max_test_timeout_sec`, ...), `run-tests.sh` (else pytest over `tests/`), `tests/`,
`solution.sh`; a Dockerfile is ignored (the workspace starts empty unless `setup.sh` or
`files/` exist).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: The tasks shipped with the package.
BUILTIN_TASKS = Path(__file__).resolve().parent / "tasks"
#: The shell helpers verifiers source (`. "$OPENENV_CHECK"`).
VERIFY_LIB = Path(__file__).resolve().parent / "verify"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class TaskFormatError(ValueError):
    """A task folder that does not follow either format; the message names the file."""


class TaskSpec(BaseModel):
    """The fields of a native `task.yaml`."""

    model_config = ConfigDict(extra="forbid")

    id: Optional[str] = Field(default=None, description="Defaults to the folder's name.")
    instruction: str = Field(min_length=1)
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    category: str = "general"
    tags: list[str] = Field(default_factory=list)
    max_steps: int = Field(default=30, gt=0, le=1000)
    command_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    setup_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    verify_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    requires: list[str] = Field(
        default_factory=list, description="Programs the task needs on PATH (e.g. git, make)."
    )
    needs_exec: bool = Field(
        default=False,
        description="Programs built in the workspace must run (not on a noexec mount).",
    )


class Task(BaseModel):
    """A loaded task: its spec, where it lives and how to verify it."""

    spec: TaskSpec
    folder: Path
    layout: Literal["native", "terminal-bench"]
    verifier: str = Field(description="verify.sh, verify.py, run-tests.sh or pytest.")

    @property
    def id(self) -> str:
        return self.spec.id or self.folder.name

    @property
    def solution(self) -> Optional[Path]:
        path = self.folder / "solution.sh"
        return path if path.is_file() else None

    def missing(self, workspace_noexec: bool = False) -> list[str]:
        """What this machine lacks to run the task (empty when it can)."""
        lacking = [tool for tool in self.spec.requires if shutil.which(tool) is None]
        if self.spec.needs_exec and workspace_noexec:
            lacking.append("a workspace that may run programs (it is mounted noexec)")
        if self.verifier == "pytest" and importlib.util.find_spec("pytest") is None:
            lacking.append("python module pytest")
        return lacking

    def verify_argv(self, task_dir: str, python: str) -> list[str]:
        """The verifier's command line, with the task folder at `task_dir` in the sandbox."""
        if self.verifier == "verify.py":
            return [python, "-I", f"{task_dir}/verify.py"]
        if self.verifier == "pytest":
            # No configuration from the workspace (the agent's): -c /dev/null, a fixed rootdir.
            tests = f"{task_dir}/tests"
            isolated = ["-c", "/dev/null", "--rootdir", tests, "-p", "no:cacheprovider"]
            return [python, "-m", "pytest", tests, "-rA", *isolated]
        return ["bash", f"{task_dir}/{self.verifier}"]


_TB_KEYS = {
    "instruction",
    "descriptions",
    "author_name",
    "author_email",
    "difficulty",
    "category",
    "tags",
    "parser_name",
    "max_agent_timeout_sec",
    "max_test_timeout_sec",
    "run_tests_in_same_shell",
    "disable_asciinema",
    "estimated_duration_sec",
    "expert_time_estimate_min",
    "junior_time_estimate_min",
}


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise TaskFormatError(f"{path}: {exc}") from exc
    if not isinstance(data, dict):
        raise TaskFormatError(f"{path}: expected a mapping of fields")
    return data


def _terminal_bench_spec(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Terminal-Bench's task.yaml fields, mapped onto ours (the rest are informational)."""
    instruction = data.get("instruction")
    if not instruction and isinstance(data.get("descriptions"), list) and data["descriptions"]:
        instruction = data["descriptions"][0].get("description")  # the older, plural form
    mapped: dict[str, Any] = {"instruction": instruction or ""}
    if data.get("difficulty") in ("easy", "medium", "hard"):
        mapped["difficulty"] = data["difficulty"]
    if data.get("category"):
        mapped["category"] = str(data["category"])
    if isinstance(data.get("tags"), list):
        mapped["tags"] = [str(tag) for tag in data["tags"]]
    if data.get("max_test_timeout_sec"):
        mapped["verify_timeout_s"] = float(data["max_test_timeout_sec"])
    ours = ("id", "max_steps", "command_timeout_s", "setup_timeout_s", "requires", "needs_exec")
    for key in ours:
        if key in data:
            mapped[key] = data[key]  # our fields, where a Terminal-Bench task adds them
    return mapped


def load_task(folder: Path) -> Task:
    """The task in `folder`, or `TaskFormatError` saying what is wrong with it."""
    folder = Path(folder).resolve()
    manifest = folder / "task.yaml"
    if not manifest.is_file():
        raise TaskFormatError(f"{folder}: no task.yaml")
    data = _read_yaml(manifest)
    native = [name for name in ("verify.sh", "verify.py") if (folder / name).is_file()]
    if len(native) > 1:
        raise TaskFormatError(f"{folder}: both verify.sh and verify.py; keep one")
    if native:
        layout: Literal["native", "terminal-bench"] = "native"
        verifier = native[0]
        fields = data
    elif (folder / "run-tests.sh").is_file() or (folder / "tests").is_dir():
        layout = "terminal-bench"
        verifier = "run-tests.sh" if (folder / "run-tests.sh").is_file() else "pytest"
        fields = _terminal_bench_spec(data, manifest)
        unknown = set(data) - _TB_KEYS - set(TaskSpec.model_fields)
        if unknown:
            raise TaskFormatError(f"{manifest}: unknown fields {sorted(unknown)}")
    else:
        raise TaskFormatError(
            f"{folder}: no verifier (verify.sh or verify.py; or run-tests.sh / tests/ for "
            "a Terminal-Bench task)"
        )
    try:
        spec = TaskSpec.model_validate(fields)
    except ValidationError as exc:
        raise TaskFormatError(f"{manifest}: {exc}") from exc
    task = Task(spec=spec, folder=folder, layout=layout, verifier=verifier)
    if not _ID.match(task.id):
        raise TaskFormatError(f"{manifest}: id {task.id!r} must be letters, digits, '.', '_', '-'")
    return task


def load_tasks(roots: Iterable[Path]) -> dict[str, Task]:
    """Every task folder directly under each root (names starting with '_' or '.' skipped),
    by id; an id that appears twice is an error."""
    tasks: dict[str, Task] = {}
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            raise TaskFormatError(f"{root}: not a folder of tasks")
        for folder in sorted(root.iterdir()):
            if not folder.is_dir() or folder.name.startswith(("_", ".")):
                continue
            task = load_task(folder)
            if task.id in tasks:
                other = tasks[task.id].folder
                raise TaskFormatError(f"task id {task.id!r} in both {folder} and {other}")
            tasks[task.id] = task
    return tasks


def task_roots(extra: Sequence[str] = ()) -> list[Path]:
    """The shipped tasks, then any folders in TERMINAL_ENV_TASKS (os.pathsep-separated)."""
    configured = [p for p in os.environ.get("TERMINAL_ENV_TASKS", "").split(os.pathsep) if p]
    return [BUILTIN_TASKS, *(Path(p) for p in [*configured, *extra])]
