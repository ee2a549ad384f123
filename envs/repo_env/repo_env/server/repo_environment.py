"""The repository environment: a git repository of a small real Python project with an injected
bug; MCP tools to read, search and edit it and to run its tests; graded by the tests.

Everything the agent's code can influence runs in `openenv.sandbox.Sandbox`: pytest (which runs
the project's, and so the agent's, code), grep for `search`, and git (a repository the agent's
code could have rewritten, e.g. `.git/config` hooks, is never run on the host). Files are read
and written on the host only through `Sandbox.host_path`, which refuses paths leaving the
workspace.

Grading (on `submit`, or when the step budget runs out) builds a second workspace from the
pristine repository, takes only the project's code folders from the agent's workspace (minus any
`conftest.py`), runs the suite there and scores the task's FAIL_TO_PASS and PASS_TO_PASS tests.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, TypeVar
from uuid import uuid4

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError, ValidationError

from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Action, Observation
from openenv.core.errors import InvalidActionError
from openenv.sandbox import Sandbox, SandboxError, SandboxLimits, WorkspacePathError

from ..models import RepoObservation, RepoState
from ..tasks import DATA, Catalog, Task, load_catalog, task_files
from ..testrun import TEST_LIMITS, run_pytest

DEFAULT_MAX_STEPS = 60
TOOLS = (
    "list_files",
    "read_file",
    "search",
    "edit_file",
    "write_file",
    "run_tests",
    "git_diff",
    "submit",
)
MAX_LISTED_FILES = 2000
MAX_READ_CHARS = 100_000
MAX_MATCHES = 200
MAX_FILE_BYTES = 1_000_000
#: Folders no tool lists or touches (git's own, and caches).
HIDDEN_DIRS = frozenset({".git", "__pycache__", ".pytest_cache"})
GITIGNORE = "__pycache__/\n.pytest_cache/\n.repo-env-report-*\n"
GIT_LIMITS = SandboxLimits(wall_time_s=5, cpu_time_s=5, memory_mb=512, max_processes=32)
#: A fixed identity and date: the same task gives the same commit, and no host git config is read.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "repo_env",
    "GIT_AUTHOR_EMAIL": "repo_env@localhost",
    "GIT_COMMITTER_NAME": "repo_env",
    "GIT_COMMITTER_EMAIL": "repo_env@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
}
_T = TypeVar("_T")


def _invalid(field: str, message: str) -> InvalidActionError:
    return InvalidActionError(
        message, errors=[{"loc": [field], "msg": message, "type": "value_error"}]
    )


def _is_source(path: str, source_dirs: tuple[str, ...]) -> bool:
    """Whether grading takes `path` from the agent: the project's code, never a conftest.py
    (which would run inside pytest and could rewrite the results)."""
    inside = any(path.startswith(folder.rstrip("/") + "/") for folder in source_dirs)
    return inside and Path(path).name != "conftest.py"


class RepoEnvironment(MCPEnvironment):
    """One episode: one task's repository, tools until `submit` (or the step budget), a grade."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        mcp = FastMCP("repo_env")
        self._add_tools(mcp)
        super().__init__(mcp)
        self._catalog: Catalog = load_catalog()
        self._default_max_steps = max_steps
        self._box: Optional[Sandbox] = None
        self._grader: Optional[Sandbox] = None
        self._task: Optional[Task] = None
        self._grade: Optional[dict[str, Any]] = None
        self._infrastructure_error: Optional[SandboxError] = None
        self._state = RepoState(episode_id=str(uuid4()), step_count=0)

    @property
    def task_ids(self) -> list[str]:
        return sorted(self._catalog.tasks)

    # -- the episode -------------------------------------------------------------------------

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        task_id: Optional[str] = None,
        max_steps: Optional[int] = None,
        **kwargs: Any,
    ) -> RepoObservation:
        """Options: `task_id` (else one drawn with `seed`), `max_steps` (tool calls before the
        episode is graded without a submit)."""
        if task_id is None:
            task_id = random.Random(seed).choice(self.task_ids)
        task = self._catalog.tasks.get(str(task_id))
        if task is None:
            raise _invalid(
                "task_id", f"unknown task {task_id!r}; one of {', '.join(self.task_ids)}"
            )
        steps = self._default_max_steps if max_steps is None else max_steps
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise _invalid("max_steps", f"max_steps must be a positive integer, not {steps!r}")
        box = self._box = self._box or Sandbox(limits=TEST_LIMITS, hidden=[DATA])
        box.clear_workspace()
        files = task_files(task)
        for path, content in files.items():
            box.write_file(path, content)
        box.write_file(".gitignore", GITIGNORE)
        made = box.run(
            [
                "sh",
                "-c",
                "git -c init.defaultBranch=main init -q && git add -A && "
                "git commit -q -m 'The repository as given'",
            ],
            env=GIT_ENV,
            limits=GIT_LIMITS,
        ).check()
        if made.exit_code != 0:
            raise SandboxError(f"could not make the git repository (is git installed?): {made}")
        self._task, self._grade, self._infrastructure_error = task, None, None
        self._state = RepoState(
            episode_id=episode_id or str(uuid4()),
            step_count=0,
            task_id=task.task_id,
            project=task.project,
            max_steps=steps,
            sandbox_backend=box.backend,
        )
        return RepoObservation(
            task_id=task.task_id,
            project=task.project,
            instruction=task.instruction,
            files=sorted([*files, ".gitignore"]),
            tool_names=list(TOOLS),
            done=False,
            reward=0.0,
            metadata={"sandbox_backend": box.backend},
        )

    async def reset_async(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> RepoObservation:
        return await asyncio.to_thread(self.reset, seed, episode_id, **kwargs)

    async def step_async(
        self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> Observation:
        is_call = isinstance(action, CallToolAction)
        if is_call:
            if self._task is not None and self._grade is not None:
                raise ValueError("The episode is over (it was graded): call reset()")
            self._state.step_count += 1
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if self._infrastructure_error is not None:
            error, self._infrastructure_error = self._infrastructure_error, None
            raise error
        if is_call and self._task is not None:
            if self._grade is None and self._state.step_count >= self._state.max_steps:
                await asyncio.to_thread(self._finish)
            if self._grade is not None:
                observation.done = True
                observation.reward = self._grade["reward"]
                observation.metadata = {**observation.metadata, "grade": self._grade}
            else:
                observation.reward = 0.0
        return observation

    @property
    def host_workspace(self) -> Optional[Path]:
        """The host folder holding the episode's repository (None before the first reset): an
        agent harness sandboxed on it works on the files the tools and the grader see."""
        return self._box.host_workspace if self._box is not None else None

    @property
    def state(self) -> RepoState:
        return self._state

    def close(self) -> None:
        for box in (self._box, self._grader):
            if box is not None:
                box.close()
        self._box = self._grader = None
        super().close()

    # -- tools -------------------------------------------------------------------------------

    def _add_tools(self, mcp: FastMCP) -> None:
        @mcp.tool
        async def list_files(path: str = ".") -> list[str]:
            """The repository's files under `path` (a folder or a file), relative to its root."""
            return await self._run(self._list_files, path)

        @mcp.tool
        async def read_file(path: str, start_line: int = 1, end_line: Optional[int] = None) -> str:
            """Lines `start_line`..`end_line` (1-based, inclusive; all by default) of a file,
            each prefixed with its number and a tab."""
            return await self._run(self._read_file, path, start_line, end_line)

        @mcp.tool
        async def search(pattern: str, path: str = ".", regex: bool = False) -> list[str]:
            """Lines containing `pattern` under `path`, as `file:line:text`. With `regex`, the
            pattern is an extended regular expression (grep -E); else plain text."""
            return await self._run(self._search, pattern, path, regex)

        @mcp.tool
        async def edit_file(path: str, old: str, new: str) -> str:
            """Replace the text `old`, which must occur exactly once in the file, with `new`."""
            return await self._run(self._edit_file, path, old, new)

        @mcp.tool
        async def write_file(path: str, content: str) -> str:
            """Create or overwrite a file with `content`."""
            return await self._run(self._write_file, path, content)

        @mcp.tool
        async def run_tests(test_id: Optional[str] = None) -> dict[str, Any]:
            """Run the test suite, or one test file or node id (e.g. `tests/test_x.py::test_y`),
            as it is in the workspace now; counts, failing tests and the end of pytest's output."""
            return await self._run(self._run_tests, test_id)

        @mcp.tool
        async def git_diff() -> str:
            """Your changes so far, as `git diff` against the repository as given."""
            return await self._run(self._git_diff_tool)

        @mcp.tool
        async def submit() -> dict[str, Any]:
            """End the episode: grade the project's code by its tests (the recorded failing tests
            must pass and the others keep passing) and show the episode's git diff."""
            return await self._run(self._finish)

    async def _run(self, function: Callable[..., _T], *args: Any) -> _T:
        try:
            return await asyncio.to_thread(function, *args)
        except SandboxError as exc:
            # The step raises it (infrastructure, never a score); the tool call reports it.
            self._infrastructure_error = exc
            raise ToolError(str(exc)) from exc

    def _episode_box(self) -> Sandbox:
        if self._box is None or self._task is None:
            raise ToolError("No episode: call reset() first")
        if self._grade is not None:
            raise ToolError("The episode is over (it was graded): call reset()")
        return self._box

    def _resolve(self, path: str) -> tuple[Path, str]:
        """The host path and the repository path of `path`, refusing any outside the repository
        or inside `.git`."""
        box = self._episode_box()
        try:
            host = box.host_path(path.strip() or ".")
        except WorkspacePathError as exc:
            raise ValidationError(f"{exc}: give a path inside the repository") from None
        relative = host.relative_to(box.host_workspace).as_posix()
        if ".git" in Path(relative).parts:
            raise ValidationError(f"{path!r} is in .git, which the tools leave alone; use git_diff")
        return host, relative

    def _text_of(self, host: Path, relative: str) -> str:
        if not host.is_file():
            raise ValidationError(f"{relative!r} is not a file (list_files shows the files)")
        with host.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise ValidationError(f"{relative!r} is larger than {MAX_FILE_BYTES} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValidationError(f"{relative!r} is not a UTF-8 text file") from None

    def _list_files(self, path: str) -> list[str]:
        host, relative = self._resolve(path)
        if host.is_file():
            return [relative]
        if not host.is_dir():
            raise ValidationError(f"no file or folder {relative!r}")
        found: list[str] = []
        root = self._episode_box().host_workspace
        for folder, dirs, files in os.walk(host):
            dirs[:] = sorted(d for d in dirs if d not in HIDDEN_DIRS)
            for name in files:
                full = Path(folder, name)
                if not full.is_symlink():
                    found.append(full.relative_to(root).as_posix())
        found.sort()
        if len(found) > MAX_LISTED_FILES:
            more = len(found) - MAX_LISTED_FILES
            return [*found[:MAX_LISTED_FILES], f"... and {more} more (list a folder)"]
        return found

    def _read_file(self, path: str, start_line: int, end_line: Optional[int]) -> str:
        host, relative = self._resolve(path)
        lines = self._text_of(host, relative).splitlines()
        last = len(lines) if end_line is None else end_line
        if start_line < 1 or last < start_line - 1:
            raise ValidationError(f"lines {start_line}..{end_line} are not a range (1-based)")
        if lines and start_line > len(lines):
            raise ValidationError(f"{relative!r} has {len(lines)} lines")
        shown, size = [], 0
        for number in range(start_line, min(last, len(lines)) + 1):
            line = f"{number}\t{lines[number - 1]}"
            size += len(line) + 1
            if size > MAX_READ_CHARS:
                shown.append(f"[cut at {MAX_READ_CHARS} characters: read from line {number}]")
                break
            shown.append(line)
        return "\n".join(shown)

    def _search(self, pattern: str, path: str, regex: bool) -> list[str]:
        _, relative = self._resolve(path)
        if not pattern:
            raise ValidationError("the pattern is empty")
        argv = ["grep", "-rnI", "-E" if regex else "-F"]
        argv += [f"--exclude-dir={d}" for d in sorted(HIDDEN_DIRS)]
        argv += ["-e", pattern, "--", relative]
        result = self._episode_box().run(argv, limits=GIT_LIMITS).check()
        if result.exit_code == 1:
            return []
        if result.exit_code != 0:
            raise ValidationError(f"search failed: {(result.stderr or result.message).strip()}")
        matches = [line.removeprefix("./")[:300] for line in result.stdout.splitlines()]
        if len(matches) > MAX_MATCHES:
            more = len(matches) - MAX_MATCHES
            return [*matches[:MAX_MATCHES], f"... and {more} more (narrow the search)"]
        return matches

    def _edit_file(self, path: str, old: str, new: str) -> str:
        host, relative = self._resolve(path)
        text = self._text_of(host, relative)
        if not old:
            raise ValidationError("`old` is empty: give the exact text to replace")
        count = text.count(old)
        if count != 1:
            where = "was not found" if count == 0 else f"occurs {count} times"
            hint = "copy it exactly" if count == 0 else "include more surrounding lines"
            raise ValidationError(f"`old` {where} in {relative!r}: {hint}")
        start = text.index(old)
        self._episode_box().write_file(relative, text[:start] + new + text[start + len(old) :])
        first = text.count("\n", 0, start) + 1
        return f"Edited {relative}: lines {first}-{first + new.count(chr(10))} now hold the text"

    def _write_file(self, path: str, content: str) -> str:
        host, relative = self._resolve(path)
        if relative == "." or host.is_dir():
            raise ValidationError(f"{relative!r} is a folder")
        data = content.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            raise ValidationError(f"the content is larger than {MAX_FILE_BYTES} bytes")
        self._episode_box().write_file(relative, data)
        return f"Wrote {relative} ({len(data)} bytes)"

    def _run_tests(self, test_id: Optional[str]) -> dict[str, Any]:
        box = self._episode_box()
        args: list[str] = []
        if test_id:
            if test_id.startswith("-") or "\0" in test_id:
                raise ValidationError("test_id is a test file or node id, not a pytest option")
            args.append(test_id)
        run = run_pytest(box, args)
        failing = sorted(t for t, outcome in run.outcomes.items() if outcome != "passed")
        return {
            "status": run.status.value,
            **run.summary(),
            "failed_tests": failing[:50],
            "collection_errors": run.collection_errors,
            "output": run.output,
        }

    def _git_diff_tool(self) -> str:
        return self._git_diff(self._episode_box())

    def _git_diff(self, box: Sandbox) -> str:
        # `add -A` first, so new and deleted files show too.
        result = box.run(
            ["sh", "-c", "git add -A && git diff --cached --no-color --no-ext-diff"],
            env=GIT_ENV,
            limits=GIT_LIMITS,
        ).check()
        if result.exit_code != 0:
            return f"(no diff: git failed: {(result.stderr or result.message).strip()[:500]})"
        return result.stdout

    # -- grading -----------------------------------------------------------------------------

    def _finish(self) -> dict[str, Any]:
        box = self._episode_box()
        assert self._task is not None
        diff = self._git_diff(box)
        grade = {**self.grade(self._task, box), "git_diff": diff}
        self._grade = grade
        self._state.submitted = True
        self._state.grade = grade
        return grade

    def _grader_box(self) -> Sandbox:
        self._grader = self._grader or Sandbox(limits=TEST_LIMITS, hidden=[DATA])
        return self._grader

    def grade(self, task: Task, workspace: Sandbox) -> dict[str, Any]:
        """Score the project's code in `workspace` by the pristine suite.

        reward = (FAIL_TO_PASS passing / all of them) * (PASS_TO_PASS passing / all of them):
        1 when the bug is fixed and nothing broke, 0 for the repository as given."""
        project = self._catalog.projects[task.project]
        grader = self._grader_box()
        grader.clear_workspace()
        for path, content in task_files(task).items():
            if not _is_source(path, project.source_dirs):
                grader.write_file(path, content)
        for path, content in self._agent_sources(workspace, project.source_dirs):
            grader.write_file(path, content)
        run = run_pytest(grader)
        fail_to_pass = task.fail_to_pass
        pass_to_pass = self._catalog.pass_to_pass(task)
        still_failing = [t for t in fail_to_pass if not run.passed(t)]
        broken = [t for t in pass_to_pass if not run.passed(t)]
        fixed_share = 1 - len(still_failing) / len(fail_to_pass)
        kept_share = 1 - len(broken) / len(pass_to_pass) if pass_to_pass else 1.0
        reward = round(fixed_share * kept_share, 6)
        return {
            "reward": reward,
            "resolved": not still_failing and not broken,
            "fail_to_pass": {
                "passed": len(fail_to_pass) - len(still_failing),
                "total": len(fail_to_pass),
                "failing": still_failing[:20],
            },
            "pass_to_pass": {
                "passed": len(pass_to_pass) - len(broken),
                "total": len(pass_to_pass),
                "failing": broken[:20],
            },
            "test_status": run.status.value,
        }

    def _agent_sources(self, box: Sandbox, source_dirs: tuple[str, ...]) -> list[tuple[str, bytes]]:
        """The agent's files in the project's code folders (symlinks and large files left out)."""
        found: list[tuple[str, bytes]] = []
        for folder in source_dirs:
            try:
                top = box.host_path(folder)
            except WorkspacePathError:
                continue
            if top.is_symlink() or not top.is_dir():
                continue
            for parent, dirs, files in os.walk(top):
                dirs[:] = sorted(d for d in dirs if d not in HIDDEN_DIRS)
                for name in sorted(files):
                    full = Path(parent, name)
                    path = full.relative_to(box.host_workspace).as_posix()
                    if full.is_symlink() or not _is_source(path, source_dirs):
                        continue
                    if full.stat().st_size <= MAX_FILE_BYTES:
                        found.append((path, full.read_bytes()))
        return found
