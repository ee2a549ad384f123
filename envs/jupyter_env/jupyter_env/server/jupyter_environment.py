"""A Jupyter kernel per session: one cell per step, nbformat outputs back.

The kernel starts in the background at the first reset (a second or two; the first cell waits
for it) and is kept across episodes: reset clears its namespace, or replaces the kernel when
something it started still runs.

Free mode (the default) has no reward (None): the environment is a tool. Task mode
(`reset(task="<id>" | "random")`) puts a CSV in the workspace and asks a question; the agent
explores with cells and ends with `JupyterAction(answer=...)`: reward 1.0 if right, else 0.0
(also 0.0 when `max_cells` run out first). A kernel or sandbox that cannot start raises
`SandboxError` (infrastructure): never a reward.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Optional
from uuid import uuid4

from openenv.core.env_server import Environment
from openenv.core.errors import InvalidActionError
from openenv.sandbox import Sandbox, SandboxError, SandboxLimits, SandboxUnavailableError

from ..models import CellError, CellOutput, JupyterAction, JupyterObservation, JupyterState
from .kernel import CellRun, SandboxedKernel
from .tasks import TASKS, Task, data_file

#: The kernel is long-lived: no CPU-time ceiling (it would add up over cells); the wall clock
#: is enforced per cell instead. Memory and processes are for the whole kernel tree.
KERNEL_LIMITS = SandboxLimits(
    wall_time_s=3600, cpu_time_s=None, memory_mb=1024, max_processes=64, max_file_mb=64
)
#: matplotlib asks fontconfig for fonts; without its configuration it complains on stderr.
_FONT_CONFIG = [p for p in ("/etc/fonts",) if Path(p).is_dir()]


class JupyterEnvironment(Environment[JupyterAction, JupyterObservation, JupyterState]):
    """A sandboxed IPython kernel per session. Reset reuses the running kernel (its namespace
    cleared) unless `reset(fresh_kernel=True)` or something it started is still running."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        *,
        limits: Optional[SandboxLimits] = None,
        backend: Optional[str] = None,
        default_timeout_s: float = 30.0,
        max_timeout_s: float = 300.0,
        task_max_cells: int = 30,
    ) -> None:
        super().__init__()
        self._limits = limits or KERNEL_LIMITS
        self._backend = backend
        self.default_timeout_s = default_timeout_s
        self.max_timeout_s = max_timeout_s
        self.task_max_cells = task_max_cells
        self._sandbox: Optional[Sandbox] = None
        self._kernel: Optional[SandboxedKernel] = None
        self._task: Optional[Task] = None
        self._timing = False
        self._state = JupyterState()

    # -- episode ---------------------------------------------------------------------------

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        *,
        task: Optional[str] = None,
        fresh_kernel: bool = False,
        timing: bool = False,
        **kwargs: Any,
    ) -> JupyterObservation:
        if kwargs:
            raise InvalidActionError(
                f"unknown reset options {sorted(kwargs)}; use task=, fresh_kernel= or timing="
            )
        self._task = self._pick_task(task, seed)
        self._timing = timing
        kernel = self._ensure_kernel()
        assert self._sandbox is not None
        reused = not fresh_kernel and kernel.soft_reset()
        if not reused:
            kernel.stop()
        self._sandbox.clear_workspace(kill_processes=False)
        if not reused:
            kernel.start_soon()  # ready by the first cell, or that cell waits for it
        files = list(self._task.files) if self._task else []
        for name in files:
            self._sandbox.write_file(name, data_file(name))
        self._state = JupyterState(
            episode_id=episode_id or str(uuid4()),
            task_id=self._task.id if self._task else None,
            max_cells=self.task_max_cells if self._task else None,
            sandbox_backend=self._sandbox.backend,
        )
        return JupyterObservation(status="ready", task=self._question(), files=files)

    def step(
        self, action: JupyterAction, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> JupyterObservation:
        if self._state.answered:
            raise InvalidActionError("the task was answered and the episode is over: reset()")
        if action.answer is not None:
            return self._judge(action)
        kernel = self._ensure_kernel()
        self._state.step_count += 1
        notice = ""
        if action.restart:
            kernel.restart()
            notice = "the kernel was restarted: variables are cleared"
        if action.restart and not action.code.strip():
            run = CellRun(status="restarted", message=notice)
        else:
            limit = action.timeout_s or timeout_s or self.default_timeout_s
            run = kernel.execute(action.code, min(limit, self.max_timeout_s))
            if notice:
                run.message = f"{notice}; {run.message}" if run.message else notice
            self._state.cells_run += 1
        self._state.kernel_restarts = kernel.restarts
        out_of_cells = self._task is not None and self._state.cells_run >= self.task_max_cells
        observation = self._observe(run)
        if out_of_cells:
            observation.done, observation.reward = True, 0.0
            observation.message = (
                f"{observation.message}; " if observation.message else ""
            ) + f"no answer within {self.task_max_cells} cells"
            self._state.answered = True
        return observation

    def _judge(self, action: JupyterAction) -> JupyterObservation:
        if self._task is None:
            raise InvalidActionError(
                "answer is only for task episodes: reset(task=...) first", field="answer"
            )
        if action.code.strip() or action.restart:
            raise InvalidActionError(
                "an answer comes alone: no code and no restart in the same action",
                field="answer",
            )
        assert action.answer is not None
        self._state.step_count += 1
        self._state.answered = True
        right, verdict = self._task.check(action.answer)
        return JupyterObservation(
            status="answered",
            message=verdict,
            task=self._question(),
            done=True,
            reward=1.0 if right else 0.0,
        )

    def _observe(self, run: CellRun) -> JupyterObservation:
        return JupyterObservation(
            status=run.status,  # type: ignore[arg-type]
            outputs=[CellOutput(**output) for output in run.outputs],
            error=CellError(**run.error) if run.error else None,
            execution_count=run.execution_count,
            message=run.message,
            task=self._question(),
            duration_s=run.duration_s if self._timing else None,
        )

    def _question(self) -> str:
        return self._task.question if self._task else ""

    def _pick_task(self, task: Optional[str], seed: Optional[int]) -> Optional[Task]:
        if task is None:
            return None
        if task == "random":
            return TASKS[random.Random(seed).choice(sorted(TASKS))]
        if task not in TASKS:
            raise InvalidActionError(
                f"unknown task {task!r}; choose one of {sorted(TASKS)} or 'random'",
                field="task",
            )
        return TASKS[task]

    def _ensure_kernel(self) -> SandboxedKernel:
        if self._sandbox is None:
            try:
                self._sandbox = Sandbox(
                    limits=self._limits, backend=self._backend, ro_binds=_FONT_CONFIG
                )
            except (SandboxUnavailableError, OSError) as exc:
                raise SandboxError(f"no sandbox for the kernel: {exc}") from exc
        if self._kernel is None:
            self._kernel = SandboxedKernel(self._sandbox)
        return self._kernel

    @property
    def state(self) -> JupyterState:
        return self._state

    def close(self) -> None:
        """Kill the kernel and delete its sockets and the workspace."""
        if self._kernel is not None:
            self._kernel.close()
            self._kernel = None
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
