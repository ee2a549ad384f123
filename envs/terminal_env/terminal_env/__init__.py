"""Terminal environment: shell commands in a sandboxed workspace, tasks scored by verifiers."""

from .client import TerminalEnv
from .models import TerminalAction, TerminalObservation, TerminalState

__all__ = ["TerminalAction", "TerminalEnv", "TerminalObservation", "TerminalState"]
