"""Typed models of the terminal environment."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import ConfigDict, Field

from openenv.core.env_server.types import Action, Observation, State


class TerminalAction(Action):
    """One shell command, run by bash in the task's workspace; `submit=True` ends the episode
    and lets the task's verifier decide the reward (after running `command`, if any)."""

    # Any task: look around, then hand in. The checker plays these twice from reset(seed=0)
    # and compares the outputs, so none may print a time (`ls -la` shows mtimes).
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"command": "pwd"}, {"command": "ls -A"}, {"submit": True}]}
    )

    command: str = Field(
        default="",
        max_length=100_000,
        description="A bash command line; the working directory and exported variables persist.",
        examples=["ls -la", "pwd", "echo hello > hello.txt"],
    )
    timeout_s: Optional[float] = Field(
        default=None,
        gt=0,
        description="Seconds before the command is killed (capped by the task's limit).",
    )
    submit: bool = Field(default=False, description="Done: run the verifier now.")


class TerminalObservation(Observation):
    instruction: str = Field(default="", description="What the task asks; sent on reset.")
    task_id: str = ""
    output: str = Field(default="", description="stdout and stderr of the command, interleaved.")
    exit_code: Optional[int] = None
    status: str = Field(default="", description="How the command ended: an ExecStatus value.")
    cwd: str = Field(default="", description="The shell's working directory after the command.")
    truncated: bool = Field(default=False, description="The output was cut to fit.")
    steps_left: int = 0


class TerminalState(State):
    task_id: str = ""
    category: str = ""
    difficulty: str = ""
    max_steps: int = 0
    cwd: str = ""
    submitted: bool = False
    score: Optional[float] = None
    verification: Optional[dict[str, Any]] = None
    backend: str = ""
