"""What one sandboxed command may use; the defaults suit a model's code snippet or shell command."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class SandboxLimits(BaseModel):
    """Ceilings for one command (or one long-lived process) in a sandbox. None: no ceiling."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wall_time_s: float = Field(default=10.0, gt=0, description="Killed after this many seconds.")
    cpu_time_s: Optional[float] = Field(default=20.0, gt=0, description="CPU seconds (RLIMIT_CPU).")
    memory_mb: Optional[int] = Field(
        default=512, gt=0, description="Memory of the process tree (cgroup; else per process)."
    )
    max_processes: Optional[int] = Field(
        default=64, gt=0, description="Processes and threads at once (fork bombs stop here)."
    )
    max_output_bytes: int = Field(
        default=1_000_000, gt=0, description="stdout plus stderr kept; more kills the command."
    )
    max_file_mb: Optional[int] = Field(
        default=64, gt=0, description="Largest file the command may write (RLIMIT_FSIZE)."
    )
    network: bool = Field(default=False, description="False: loopback only, no other network.")
