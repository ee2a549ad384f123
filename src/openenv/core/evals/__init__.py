"""OpenEnv's evaluation interface (``openenv.core.evals``), kept so code written for it runs
unchanged: `EvalConfig` / `EvalResult`, the `EvalHarness` ABC (``run`` -> scores) and
`InspectAIHarness` (an Inspect AI task by name). `openenv.evals` builds on it: its harnesses
are these `EvalHarness`es too, and add per-task results over an environment's task set."""

from __future__ import annotations

from .base import EvalHarness
from .inspect_harness import InspectAIHarness
from .types import EvalConfig, EvalResult

__all__ = ["EvalConfig", "EvalHarness", "EvalResult", "InspectAIHarness"]
