"""The harness contract OpenEnv defines: parameters in, a flat dict of scores out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from .types import EvalConfig, EvalResult

__all__ = ["EvalHarness"]


class EvalHarness(ABC):
    """An evaluation harness; `run_from_config` records the config beside the scores so a
    result always says how it was obtained."""

    @abstractmethod
    def run(
        self,
        harness_version: str,
        library_versions: dict[str, str],
        dataset: str,
        eval_parameters: dict[str, Any],
    ) -> dict[str, Any]:
        """Run the evaluation; metric name to value."""

    def run_from_config(self, config: EvalConfig) -> EvalResult:
        scores = self.run(
            harness_version=config.harness_version,
            library_versions=config.library_versions,
            dataset=config.dataset,
            eval_parameters=config.eval_parameters,
        )
        return EvalResult(config=config, scores=scores)

    @property
    def name(self) -> str:
        return type(self).__name__
