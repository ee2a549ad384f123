"""What an evaluation was asked to do and what it scored, as strict records."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EvalConfig", "EvalResult"]

_STRICT = ConfigDict(extra="forbid", validate_assignment=True)


class EvalConfig(BaseModel):
    """Enough to rerun an evaluation: the harness and its version, the library versions, the
    dataset and the harness's parameters."""

    model_config = _STRICT

    harness_name: str = Field(description="The harness that ran the evaluation")
    harness_version: str = Field(description="Its version")
    library_versions: dict[str, str] = Field(description="Versions of the libraries involved")
    dataset: str = Field(description="What was evaluated on")
    eval_parameters: dict[str, Any] = Field(description="The harness's parameters")


class EvalResult(BaseModel):
    """An `EvalConfig` with the scores it produced."""

    model_config = _STRICT

    config: EvalConfig = Field(description="What was run")
    scores: dict[str, Any] = Field(description="Metric name to value")
