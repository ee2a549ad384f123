"""A tiny environment for the server-health test: each step runs the action's Python code in
the session's sandbox and reports the typed result. Serve: `uvicorn tests.sandbox.sandbox_app:app`
(OPENENV_SANDBOX picks the backend)."""

from __future__ import annotations

from typing import Any, Optional
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_app
from openenv.sandbox import Sandbox, SandboxLimits

LIMITS = SandboxLimits(
    wall_time_s=20,
    cpu_time_s=2,
    memory_mb=128,
    max_processes=24,
    max_output_bytes=20_000,
    max_file_mb=2,
)


class RunCode(Action):
    code: str


class CodeResult(Observation):
    status: str = ""
    stdout: str = ""
    stderr: str = ""
    exit_code: Optional[int] = None
    backend: str = ""


class SandboxedCodeEnvironment(Environment[RunCode, CodeResult, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._box = Sandbox(limits=LIMITS)
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> CodeResult:
        self._box.clear_workspace()
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return CodeResult(backend=self._box.backend)

    def step(self, action: RunCode, timeout_s: Optional[float] = None, **kwargs: Any) -> CodeResult:
        self._state.step_count += 1
        self._box.write_file("main.py", action.code)
        result = self._box.run([self._box.python, "main.py"]).check()
        return CodeResult(
            status=result.status.value,
            stdout=result.stdout[-2000:],
            stderr=result.stderr[-2000:],
            exit_code=result.exit_code,
            backend=result.backend,
            reward=1.0 if result.ok else 0.0,
            done=False,
        )

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        self._box.close()


app = create_app(SandboxedCodeEnvironment, RunCode, CodeResult, env_name="sandboxed_code")
