"""Echo environment in OpenEnv's flat layout: the typed client and the MCP action types."""

from .client import EchoEnv
from .models import CallToolAction, CallToolObservation, ListToolsAction

__all__ = ["CallToolAction", "CallToolObservation", "EchoEnv", "ListToolsAction"]
