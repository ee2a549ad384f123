"""Jupyter environment: a real IPython kernel per session, in the sandbox."""

from .client import JupyterEnv
from .models import CellError, CellOutput, JupyterAction, JupyterObservation, JupyterState

__all__ = [
    "CellError",
    "CellOutput",
    "JupyterAction",
    "JupyterEnv",
    "JupyterObservation",
    "JupyterState",
]
