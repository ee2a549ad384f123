"""Agent harnesses: an external agent inside an environment, one conversational turn per step
(RFC 005: `HarnessEnvironment`), and the trainer-side rollout layer (white-box and black-box
rollouts, a TRL `rollout_func`). Names load on first use: importing this package is cheap."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    # RFC 005: the harness inside the environment
    "HarnessConfig": ".config",
    "HarnessTransport": ".config",
    "HarnessEvent": ".events",
    "HarnessEventType": ".events",
    "HarnessResponse": ".events",
    "HarnessClientMessage": ".events",
    "HarnessProtocolError": ".events",
    "events_to_metadata": ".events",
    "AgenticHarnessAdapter": ".adapter",
    "HarnessError": ".adapter",
    "HarnessStartupError": ".adapter",
    "HarnessNotRunningError": ".adapter",
    "HarnessTurnTimeoutError": ".adapter",
    "resolve_tool_conflicts": ".tools",
    "HarnessMCPBridge": ".bridge",
    "build_bridge_server": ".bridge",
    "HarnessProcess": ".process",
    "HarnessAction": ".environment",
    "HarnessEnvironment": ".environment",
    # the trainer-side rollout layer
    "RESERVED_TOOL_NAMES": ".rollout",
    "Message": ".rollout",
    "ToolResult": ".rollout",
    "VerifyResult": ".rollout",
    "RolloutEvent": ".rollout",
    "ToolTraceEntry": ".rollout",
    "ModelStep": ".rollout",
    "ModelStepResult": ".rollout",
    "HarnessRolloutResult": ".rollout",
    "HarnessRunLimits": ".rollout",
    "ResourceSession": ".rollout",
    "ResourceSessionFactory": ".rollout",
    "HarnessAdapter": ".rollout",
    "StepEnvSessionAdapter": ".rollout",
    "SessionMCPBridge": ".rollout",
    "MCPHarnessAdapter": ".rollout",
    "CLIHarnessAdapter": ".rollout",
    "build_harness_rollout_func": ".rollout",
    "LoopOwningSession": ".rollout",
    "TrainableSession": ".rollout",
    "TraceEntry": ".rollout",
    "RolloutInfrastructureError": ".rollout",
    "AgentHarnessAdapter": ".blackbox",
    "TrainingTurn": ".training",
    "TrainingTrace": ".training",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
