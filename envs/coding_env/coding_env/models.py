"""Typed models of the coding environment (OpenEnv's `CodeAction`/`CodeObservation`/`CodeState`
field names, plus what an agent needs to see why its code failed)."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from openenv.core.env_server.types import Action, Observation, State
from openenv.sandbox import ExecStatus

#: Marks an observation field the environment checker leaves out of its determinism check
#: (a timing: the same code never takes exactly the same time twice).
VOLATILE = {"volatile": True}


class CodeAction(Action):
    """Python source to run, like a notebook cell."""

    # A legal episode for the environment checker: define, then use (persistent by default).
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"code": "x = 6 * 7\nprint(x)"},
                {"code": "print(x + 1)"},
                {"code": "1 / 0"},
            ]
        }
    )

    code: str


class ExceptionInfo(BaseModel):
    """An exception the code raised and did not catch."""

    type: str
    message: str = ""
    traceback: str = ""


class TestResult(BaseModel):
    """One hidden test: its name and outcome, never its expected value."""

    __test__ = False  # not a pytest class

    name: str
    passed: bool
    error: str = ""


class CodeObservation(Observation):
    stdout: str = ""
    stderr: str = ""
    exit_code: int = Field(
        default=0,
        description="Python's: 0, 1 on an uncaught exception, SystemExit's code; -1 if killed.",
    )
    status: ExecStatus = Field(default=ExecStatus.OK, description="Why the code ended.")
    exception: Optional[ExceptionInfo] = None
    duration_s: float = Field(
        default=0.0, description="How long the code ran, in seconds.", json_schema_extra=VOLATILE
    )
    truncated: bool = Field(default=False, description="Output was cut at the output limit.")
    message: str = Field(default="", description="Why, in one line, when status is a limit.")
    backend: str = Field(
        default="", description="Sandbox isolation in force: bubblewrap or process."
    )
    persistent: bool = Field(default=False, description="Names persist across steps (a REPL).")
    restarted: bool = Field(
        default=False,
        description="The REPL was restarted after the previous step killed it: names are gone.",
    )
    task_id: Optional[str] = None
    prompt: str = Field(default="", description="The task, after reset (empty when free-form).")
    tests_passed: int = 0
    tests_total: int = 0
    test_results: list[TestResult] = Field(default_factory=list)


class CodeState(State):
    last_exit_code: int = 0
    task_id: Optional[str] = None
    persistent: bool = False
    backend: str = ""
    restarts: int = 0
    best_tests_passed: int = 0
