"""Terminal environment: shell commands in a sandboxed workspace, tasks scored by verifiers."""

from .client import TerminalEnv, TerminalToolEnv
from .models import TerminalAction, TerminalObservation, TerminalState

__all__ = [
    "TerminalAction",
    "TerminalEnv",
    "TerminalObservation",
    "TerminalState",
    "TerminalToolEnv",
]
