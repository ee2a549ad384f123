"""Shell tasks in a sandboxed workspace; the reward is the task's verifier's verdict."""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional
from uuid import uuid4

from openenv.core.env_server import Environment
from openenv.core.errors import InvalidActionError
from openenv.sandbox import Sandbox, SandboxError, SandboxLimits, describe_backend

from ..models import TerminalAction, TerminalObservation, TerminalState
from ..tasks import VERIFY_LIB, Task, load_tasks, task_roots
from ..verdict import Verdict, judge
from .shell import ShellState, run_command

#: Commits work without a git config (the workspace is HOME; nothing is written there).
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Agent",
    "GIT_AUTHOR_EMAIL": "agent@example.com",
    "GIT_COMMITTER_NAME": "Agent",
    "GIT_COMMITTER_EMAIL": "agent@example.com",
}
#: What the verifier never takes from the agent: git configuration in HOME (the workspace).
_VERIFIER_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
_SETUP = (
    'set -e\nif [ -d "$TASK_DIR/files" ]; then cp -R "$TASK_DIR/files/." .; fi\n'
    'if [ -f "$TASK_DIR/setup.sh" ]; then bash "$TASK_DIR/setup.sh"; fi\n'
)


def _clip(text: str, limit: int) -> tuple[str, bool]:
    """At most `limit` characters: the start and the end, with the cut said in between."""
    if len(text) <= limit:
        return text, False
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters cut ...]\n{text[-half:]}", True


class TerminalEnvironment(Environment[TerminalAction, TerminalObservation, TerminalState]):
    """One task per episode: `reset(task_id=..., category=..., difficulty=..., seed=...)`."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        tasks_dirs: Sequence[str | Path] = (),
        backend: Optional[str] = None,
        max_output_chars: int = 16_000,
        memory_mb: int = 1024,
    ) -> None:
        super().__init__()
        roots = task_roots([str(p) for p in tasks_dirs])
        self.tasks: dict[str, Task] = load_tasks(roots)
        self._max_output_chars = max_output_chars
        self._limits = SandboxLimits(wall_time_s=30, cpu_time_s=60, memory_mb=memory_mb)
        # The agent's sandbox cannot read the tasks (their verifiers and solutions); the
        # verifier's, on the same workspace, sees them read-only.
        self._box = Sandbox(limits=self._limits, backend=backend, hidden=roots, env=GIT_IDENTITY)
        self._judge = Sandbox(
            self._box.host_workspace,
            limits=self._limits,
            backend=self._box.backend,
            ro_binds=[*roots, VERIFY_LIB],
            env=GIT_IDENTITY,
        )
        # Docker's default --tmpfs /tmp is noexec: tasks that run what they build cannot work.
        noexec = bool(os.statvfs(self._box.host_workspace).f_flag & os.ST_NOEXEC)
        self.unavailable = {
            tid: lacking for tid, t in self.tasks.items() if (lacking := t.missing(noexec))
        }
        self._task: Optional[Task] = None
        self._shell = ShellState(cwd=self._box.workspace)
        self._state = TerminalState(backend=self._box.backend)

    # -- episode -----------------------------------------------------------------------------

    def _pick(self, seed: Optional[int], task_id: Optional[str], **filters: Any) -> Task:
        if task_id is not None:
            if task_id not in self.tasks:
                raise InvalidActionError(
                    f"unknown task_id {task_id!r}; known: {', '.join(sorted(self.tasks))}",
                    errors=[{"loc": ["task_id"], "msg": "unknown task", "type": "value_error"}],
                )
            if task_id in self.unavailable:
                missing = ", ".join(self.unavailable[task_id])
                raise InvalidActionError(f"task {task_id!r} needs {missing}, missing here")
            return self.tasks[task_id]
        candidates = [
            task
            for tid, task in sorted(self.tasks.items())
            if tid not in self.unavailable
            and all(
                value is None or getattr(task.spec, key) == value for key, value in filters.items()
            )
        ]
        if not candidates:
            raise InvalidActionError(f"no available task matches {filters}")
        return random.Random(seed).choice(candidates)

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        task_id: Optional[str] = None,
        category: Optional[str] = None,
        difficulty: Optional[str] = None,
        **kwargs: Any,
    ) -> TerminalObservation:
        task = self._pick(seed, task_id, category=category, difficulty=difficulty)
        self._task = None
        self._box.clear_workspace()
        setup = self._judge.run(
            ["bash", "-c", _SETUP],
            limits=self._limits.model_copy(update={"wall_time_s": task.spec.setup_timeout_s}),
            env={"TASK_DIR": str(task.folder)},
        ).check()
        if not setup.ok:
            raise SandboxError(
                f"task {task.id!r} could not be set up ({setup.status.value}, exit "
                f"{setup.exit_code}): {(setup.stdout + setup.stderr)[-2000:]}"
            )
        self._task = task
        self._shell = ShellState(cwd=self._box.workspace)
        self._state = TerminalState(
            episode_id=episode_id or str(uuid4()),
            task_id=task.id,
            category=task.spec.category,
            difficulty=task.spec.difficulty,
            max_steps=task.spec.max_steps,
            cwd=self._shell.cwd,
            backend=self._box.backend,
        )
        return TerminalObservation(
            instruction=task.spec.instruction.strip(),
            task_id=task.id,
            cwd=self._shell.cwd,
            steps_left=task.spec.max_steps,
            reward=0.0,
            metadata={
                "category": task.spec.category,
                "difficulty": task.spec.difficulty,
                "sandbox": describe_backend(self._box.backend),
            },
        )

    def step(
        self, action: TerminalAction, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> TerminalObservation:
        task = self._task
        if task is None:
            raise InvalidActionError("no episode is running: call reset()")
        if self._state.submitted:
            raise InvalidActionError("the episode is over (verified): call reset()")
        if not action.command.strip() and not action.submit:
            raise InvalidActionError(
                "empty command; send a command, or submit=True to finish",
                errors=[{"loc": ["command"], "msg": "empty command", "type": "value_error"}],
            )
        if "\0" in action.command:
            raise InvalidActionError(
                "the command contains a NUL character, which bash cannot hold",
                errors=[{"loc": ["command"], "msg": "NUL character", "type": "value_error"}],
            )
        observation = TerminalObservation(task_id=task.id, cwd=self._shell.cwd, reward=0.0)
        if action.command.strip():
            cap = task.spec.command_timeout_s
            wall = min(action.timeout_s or cap, cap)
            limits = self._limits.model_copy(update={"wall_time_s": wall})
            ran = run_command(self._box, action.command, self._shell, limits)
            ran.result.check()
            self._shell = ran.state
            output, truncated = _clip(ran.output, self._max_output_chars)
            observation.output = output
            observation.truncated = truncated or ran.result.truncated
            observation.exit_code = ran.result.exit_code
            observation.status = ran.result.status.value
            observation.cwd = self._shell.cwd
            if ran.result.message:
                observation.metadata["message"] = ran.result.message
        self._state.step_count += 1
        self._state.cwd = self._shell.cwd
        observation.steps_left = max(0, task.spec.max_steps - self._state.step_count)
        if action.submit or observation.steps_left == 0:
            verdict = self.verify()
            observation.done = True
            observation.reward = verdict.score
            observation.metadata["verification"] = verdict.model_dump()
        return observation

    def verify(self) -> Verdict:
        """Run the task's verifier on the workspace now; ends the episode."""
        task = self._task
        if task is None:
            raise InvalidActionError("no episode is running: call reset()")
        token = secrets.token_hex(16)
        folder = str(task.folder)
        env = {
            **_VERIFIER_ENV,
            "TASK_DIR": folder,
            "TEST_DIR": f"{folder}/tests",
            "WORKSPACE": self._judge.workspace,
            "OPENENV_CHECK": str(VERIFY_LIB / "check.sh"),
            "OPENENV_VERIFY_LIB": str(VERIFY_LIB),
        }
        limits = self._limits.model_copy(
            update={"wall_time_s": task.spec.verify_timeout_s, "cpu_time_s": None}
        )
        result = self._judge.run(
            task.verify_argv(folder, self._judge.python), stdin=token + "\n", limits=limits, env=env
        ).check()
        verdict = judge(task, result, token)
        self._state.submitted = True
        self._state.score = verdict.score
        self._state.verification = verdict.model_dump()
        return verdict

    @property
    def task(self) -> Optional[Task]:
        """The task of the running episode (None before the first reset)."""
        return self._task

    @property
    def state(self) -> TerminalState:
        return self._state

    @property
    def host_workspace(self) -> Path:
        """The episode's folder on the host: an agent harness works on the same files."""
        return Path(self._box.host_workspace)

    def close(self) -> None:
        self._judge.close()
        self._box.close()
