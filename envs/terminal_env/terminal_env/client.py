"""Typed client of the terminal environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import TerminalAction, TerminalObservation, TerminalState


class TerminalEnv(EnvClient[TerminalAction, TerminalObservation, TerminalState]):
    """`reset(task_id="count-lines")`, `step(TerminalAction(command="wc -l data.txt"))`, then
    `step(TerminalAction(submit=True))`: the reward and `metadata["verification"]` arrive."""
