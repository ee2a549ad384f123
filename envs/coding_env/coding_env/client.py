"""Typed client of the coding environment (OpenEnv's `CodingEnv` name)."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import CodeAction, CodeObservation, CodeState


class CodingEnv(EnvClient[CodeAction, CodeObservation, CodeState]):
    """`step(CodeAction(code="print(1)"))`; `reset(task_id="fizzbuzz")` for a scored task."""
