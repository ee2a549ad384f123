"""Environment checkers, like Gymnasium's `check_env`.

```python
from openenv.testing import check_env, check_server

check_env(MyEnvironment)                       # in-process; raises EnvCheckError on failure
report = check_server("http://localhost:8000", raise_on_failure=False)
print(report)                                  # a readable table; report.to_dict() for JSON
```

`check_env` drives environment instances the way the server does; `check_server` drives a
running server over HTTP and WebSocket. Both return a `CheckReport` of `CheckResult`s and, with
`raise_on_failure=True` (the default), raise `EnvCheckError` listing every failed check. Sample
actions are generated from the action schema unless given (see `openenv.testing.samples`).
`acheck_env` / `acheck_server` are the same for code already running an event loop.
`validate_local_environment` / `validate_running_environment` are `openenv validate`: deployment
criteria for a folder and OpenEnv's endpoint criteria for a server, plus these checks.
"""

from __future__ import annotations

from .env_checker import acheck_env, check_env, declared_types
from .live_server import free_port, running_server
from .report import CheckReport, CheckResult, EnvCheckError, Severity
from .samples import (
    SampleGenerationError,
    sample_actions_from_schema,
    sample_value,
    tool_call_samples,
)
from .server_checker import acheck_server, check_server
from .validation import (
    Criterion,
    ValidationReport,
    check_structure,
    validate_local_environment,
    validate_running_environment,
)

__all__ = [
    "CheckReport",
    "CheckResult",
    "Criterion",
    "EnvCheckError",
    "SampleGenerationError",
    "Severity",
    "ValidationReport",
    "acheck_env",
    "acheck_server",
    "check_env",
    "check_server",
    "check_structure",
    "declared_types",
    "free_port",
    "running_server",
    "sample_actions_from_schema",
    "sample_value",
    "tool_call_samples",
    "validate_local_environment",
    "validate_running_environment",
]
