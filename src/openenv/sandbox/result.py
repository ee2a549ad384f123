"""The typed outcome of a sandboxed command: what it printed and why it ended."""

from __future__ import annotations

from enum import Enum
from typing import Any, Optional

from pydantic import BaseModel, Field

from ..core.errors import EnvironmentExecutionError


class SandboxError(EnvironmentExecutionError):
    """The sandbox itself failed (not the command): an infrastructure error. Raised by
    environments so the episode is reported as failed, never scored."""

    def __init__(self, message: str, data: Optional[dict[str, Any]] = None) -> None:
        super().__init__(message, data={**(data or {}), "category": "infrastructure"})


class ExecStatus(str, Enum):
    """Why a command ended. Only SANDBOX_ERROR is the sandbox's own failure (infrastructure):
    never score it as the agent's reward."""

    OK = "ok"  # exited 0
    ERROR = "error"  # exited non-zero
    TIMEOUT = "timeout"  # wall clock ran out; every process killed
    CPU_LIMIT = "cpu_limit"
    MEMORY_LIMIT = "memory_limit"
    PROCESS_LIMIT = "process_limit"  # could not fork (a fork bomb, or too many threads)
    OUTPUT_LIMIT = "output_limit"  # printed more than max_output_bytes; killed
    FILE_LIMIT = "file_limit"  # wrote a file larger than max_file_mb
    KILLED = "killed"  # ended by a signal
    SANDBOX_ERROR = "sandbox_error"  # the sandbox could not run the command


class ExecResult(BaseModel):
    """One command's outcome. `stdout`/`stderr` are decoded as UTF-8 (invalid bytes replaced)
    and cut at the output limit."""

    status: ExecStatus
    exit_code: Optional[int] = Field(default=None, description="None when killed by a signal.")
    signal: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    duration_s: float = 0.0
    backend: str = Field(description="'bubblewrap' or 'process': the isolation that was in force.")
    message: str = Field(default="", description="Why, in one line, when status is not ok/error.")

    @property
    def ok(self) -> bool:
        return self.status is ExecStatus.OK

    @property
    def infrastructure_error(self) -> bool:
        return self.status is ExecStatus.SANDBOX_ERROR

    def check(self) -> ExecResult:
        """This result, or `SandboxError` when the sandbox could not run the command."""
        if self.infrastructure_error:
            raise SandboxError(f"sandbox ({self.backend}): {self.message}")
        return self
