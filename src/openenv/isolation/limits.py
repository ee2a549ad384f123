"""`ResourceLimits`: the ceilings one confined process tree gets (CPU, memory, processes, time).

Providers put them on an environment (`EnvSpec.limits`), `cgroups.create` enforces them for a
whole tree, and the sandbox sets them for each command.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class ResourceLimits(BaseModel):
    """Ceilings for one environment. None means the provider's default (no limit)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: Optional[float] = Field(default=None, gt=0, description="CPU cores (fractions allowed).")
    memory_mb: Optional[int] = Field(default=None, gt=0, description="Memory ceiling in MiB.")
    pids: Optional[int] = Field(default=None, gt=0, description="Processes and threads at once.")
    wall_time_s: Optional[float] = Field(
        default=None, gt=0, description="Lifetime; the provider stops the environment after it."
    )

    def is_empty(self) -> bool:
        return all(value is None for value in self.model_dump().values())
