"""Typed models of the Jupyter environment.

Outputs keep nbformat's shape (`output_type` stream / display_data / execute_result / error,
with `name`+`text`, `data`+`metadata` mime bundles, or `ename`/`evalue`/`traceback`), so a
notebook renderer or an agent that knows Jupyter reads them as they are.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from openenv.core.env_server.types import Action, Observation, State

#: ok / error: the cell finished (error: it raised); timeout: it was interrupted and the kernel
#: kept its variables; restarted: the kernel died or ignored the interrupt and was restarted (its
#: variables are lost); ready: after reset; answered: the task's answer was checked.
CellStatus = Literal["ready", "ok", "error", "timeout", "restarted", "answered"]


class JupyterAction(Action):
    """One cell of Python (IPython syntax: `%magics` too) run in the session's kernel.

    `restart` starts a fresh kernel first (`code` may then be empty). `answer` submits the final
    answer of a task episode (with no `code`); it ends the episode."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"code": "x = 6 * 7\nx"},
                {"code": "print(x + 1)"},
                {"code": "from IPython.display import HTML\nHTML('<b>bold</b>')"},
                {"code": "1 / 0"},
                {"code": "import os\nsorted(os.listdir('.'))"},
            ]
        }
    )

    code: str = Field(default="", max_length=200_000, description="The cell's source.")
    timeout_s: Optional[float] = Field(
        default=None,
        gt=0,
        description="Interrupt the cell after this many seconds (capped by the server).",
    )
    restart: bool = Field(default=False, description="Restart the kernel before the cell.")
    answer: Optional[str] = Field(
        default=None, max_length=10_000, description="Task mode: the final answer."
    )


class CellOutput(BaseModel):
    """One nbformat output. Fields that do not apply to its `output_type` are None."""

    model_config = ConfigDict(extra="forbid")

    output_type: Literal["stream", "display_data", "execute_result", "error"]
    name: Optional[str] = None
    text: Optional[str] = None
    data: Optional[dict[str, Any]] = None
    metadata: Optional[dict[str, Any]] = None
    execution_count: Optional[int] = None
    ename: Optional[str] = None
    evalue: Optional[str] = None
    traceback: Optional[list[str]] = None


class CellError(BaseModel):
    """The exception a cell raised; the traceback has no ANSI colour codes."""

    model_config = ConfigDict(extra="forbid")

    ename: str
    evalue: str
    traceback: list[str] = Field(default_factory=list)


class JupyterObservation(Observation):
    status: CellStatus = "ready"
    outputs: list[CellOutput] = Field(default_factory=list)
    error: Optional[CellError] = None
    #: the cell's number (In [n]); 1 is the first cell of an episode
    execution_count: Optional[int] = None
    #: why a cell timed out or the kernel restarted, or how an answer was judged
    message: str = ""
    #: task mode: the question to answer (repeated every step); empty in free mode
    task: str = ""
    #: the data files in the workspace (the kernel's working directory) at reset
    files: list[str] = Field(default_factory=list)
    #: the cell's wall time, only after reset(timing=True): by default observations carry no
    #: clock reading, so that the same seed and cells give the same episode
    duration_s: Optional[float] = None


class JupyterState(State):
    #: None in free mode
    task_id: Optional[str] = None
    max_cells: Optional[int] = None
    cells_run: int = 0
    kernel_restarts: int = 0
    answered: bool = False
    #: "bubblewrap" or "process" (see the README: what isolation is in force)
    sandbox_backend: str = ""
