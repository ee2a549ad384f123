"""Typed client of the Jupyter environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import JupyterAction, JupyterObservation, JupyterState


class JupyterEnv(EnvClient[JupyterAction, JupyterObservation, JupyterState]):
    """`step(JupyterAction(code="df.describe()"))`; `reset(task="random", seed=0)` for a task."""
