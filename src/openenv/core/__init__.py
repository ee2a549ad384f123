"""openenv core: the server base (`env_server`) and the clients.

Every name is imported on first use, so that light users (the CLI, the manifest reader) do
not pay for the server stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "EnvClient": ".env_client",
    "SyncEnvClient": ".sync_client",
    "GenericEnvClient": ".generic_client",
    "GenericAction": ".generic_client",
    "MCPClientBase": ".mcp_client",
    "MCPToolClient": ".mcp_client",
    "StepResult": ".client_types",
    "OpenEnvError": ".errors",
    "ServerError": ".errors",
    "InvalidRequestError": ".errors",
    "EnvironmentExecutionError": ".errors",
    "CapacityReachedError": ".errors",
    "SessionLostError": ".errors",
    "ConnectionLostError": ".errors",
    "RequestTimeoutError": ".errors",
    "ToolCallError": ".errors",
    "ServerUnreachableError": ".errors",
    "ProtocolViolationError": ".errors",
    "RewardError": ".errors",
    "LLMClient": ".llm_client",
    "LLMResponse": ".llm_client",
    "ToolCall": ".llm_client",
    "OpenAIClient": ".llm_client",
    "AnthropicClient": ".llm_client",
    "create_llm_client": ".llm_client",
    "is_infrastructure_error": ".errors",
    "EnvironmentDiedError": ".errors",
    "EnvironmentOwner": ".owner",
    "PendingClient": ".owner",
}


if TYPE_CHECKING:  # what type checkers and IDEs see; at run time names load on first use
    from .client_types import StepResult
    from .env_client import EnvClient
    from .env_server import *  # noqa: F403
    from .errors import (
        CapacityReachedError,
        ConnectionLostError,
        EnvironmentDiedError,
        EnvironmentExecutionError,
        InvalidRequestError,
        OpenEnvError,
        ProtocolViolationError,
        RequestTimeoutError,
        RewardError,
        ServerError,
        ServerUnreachableError,
        SessionLostError,
        ToolCallError,
        is_infrastructure_error,
    )
    from .generic_client import GenericAction, GenericEnvClient
    from .llm_client import (
        AnthropicClient,
        LLMClient,
        LLMResponse,
        OpenAIClient,
        ToolCall,
        create_llm_client,
    )
    from .mcp_client import MCPClientBase, MCPToolClient
    from .owner import EnvironmentOwner, PendingClient
    from .sync_client import SyncEnvClient


def _server() -> Any:
    return importlib.import_module(".env_server", __name__)


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return [*_server().__all__, *_LAZY]
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
    elif name in _server().__all__:
        value = getattr(_server(), name)
    else:
        raise AttributeError(f"module 'openenv.core' has no attribute {name!r}")
    globals()[name] = value
    return value
