"""Client-side result types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

ObsT = TypeVar("ObsT")


@dataclass
class StepResult(Generic[ObsT]):
    """What reset/step return on the client: the observation, its reward, done, and metadata."""

    observation: ObsT
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
