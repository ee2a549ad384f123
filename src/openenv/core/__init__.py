"""openenv core: the server base (`env_server`) and the clients."""

from __future__ import annotations

import importlib
from typing import Any

from .env_server import *  # noqa: F403
from .env_server import __all__ as _server_all

_LAZY = {
    "EnvClient": ".env_client",
    "SyncEnvClient": ".sync_client",
    "GenericEnvClient": ".generic_client",
    "GenericAction": ".generic_client",
    "MCPClientBase": ".mcp_client",
    "MCPToolClient": ".mcp_client",
    "StepResult": ".client_types",
    "OpenEnvError": ".client_errors",
    "ServerError": ".client_errors",
    "InvalidRequestError": ".client_errors",
    "EnvironmentExecutionError": ".client_errors",
    "CapacityReachedError": ".client_errors",
    "SessionLostError": ".client_errors",
    "ConnectionLostError": ".client_errors",
    "RequestTimeoutError": ".client_errors",
    "ToolCallError": ".client_errors",
    "RewardError": ".client_errors",
    "LLMClient": ".llm_client",
    "LLMResponse": ".llm_client",
    "ToolCall": ".llm_client",
    "OpenAIClient": ".llm_client",
    "AnthropicClient": ".llm_client",
    "create_llm_client": ".llm_client",
    "is_infrastructure_error": ".client_errors",
}

__all__ = [*_server_all, *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'openenv.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
