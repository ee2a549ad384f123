"""Agent harnesses: an external agent inside an environment, one conversational turn per step
(RFC 005: `HarnessEnvironment`), and the trainer-side rollout layer (white-box and black-box
rollouts, a TRL `rollout_func`). Names load on first use: importing this package is cheap."""

from __future__ import annotations

from openenv._lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
