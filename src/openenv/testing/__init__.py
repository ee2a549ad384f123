"""Environment checkers, like Gymnasium's `check_env`: one set of checks, two drivers.

```python
from openenv.testing import check_env, check_server

check_env(MyEnvironment)                       # in-process; raises EnvCheckError on failure
report = check_server("http://localhost:8000", raise_on_failure=False)
print(report)                                  # a readable table; report.to_json() for JSON
```

`check_env` drives environment instances the way the server does; `check_server` drives a
running server over WebSocket and HTTP. Each check is written once (`checks.py`) and run through
a driver (`drivers.py`), which adds the checks only it can make. Both return a `CheckReport`
and, with `raise_on_failure=True` (the default), raise `EnvCheckError` listing every failed
check. Sample actions are the action schema's declared `examples`, else generated from it (see
`openenv.testing.samples`), unless given. `validate_local_environment` /
`validate_running_environment` are `openenv validate`: a folder's deployment criteria, then the
same checks against its running server.
"""

from __future__ import annotations

from .api import acheck_env, acheck_server, check_env, check_server
from .drivers import declared_types
from .live_server import free_port, running_server
from .report import CheckReport, CheckResult, EnvCheckError, Severity
from .samples import (
    SampleGenerationError,
    declared_samples,
    sample_actions_from_schema,
    sample_value,
    tool_call_samples,
)
from .validation import check_structure, validate_local_environment, validate_running_environment

__all__ = [
    "CheckReport",
    "CheckResult",
    "EnvCheckError",
    "SampleGenerationError",
    "Severity",
    "acheck_env",
    "acheck_server",
    "check_env",
    "check_server",
    "check_structure",
    "declared_samples",
    "declared_types",
    "free_port",
    "running_server",
    "sample_actions_from_schema",
    "sample_value",
    "tool_call_samples",
    "validate_local_environment",
    "validate_running_environment",
]
