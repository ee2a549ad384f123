"""A sandbox for untrusted commands: a model's code, shell commands, test suites.

`Sandbox` gives a private workspace and runs commands in it under bubblewrap (or, where that
cannot run, a weaker process sandbox; see `sandbox.py`) with CPU, memory, process, output and
wall-clock limits, and reports each as a typed `ExecResult`.
"""

from .limits import SandboxLimits
from .result import ExecResult, ExecStatus, SandboxError
from .sandbox import (
    BACKENDS,
    WORKSPACE,
    Sandbox,
    SandboxProcess,
    SandboxUnavailableError,
    WorkspacePathError,
    choose_backend,
    describe_backend,
    process_count_bounded,
)

__all__ = [
    "BACKENDS",
    "WORKSPACE",
    "ExecResult",
    "ExecStatus",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxProcess",
    "SandboxUnavailableError",
    "WorkspacePathError",
    "choose_backend",
    "describe_backend",
    "process_count_bounded",
]
