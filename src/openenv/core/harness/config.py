"""How to run an external agent harness (RFC 005): its command, working folder and model wiring."""

from __future__ import annotations

import os
from enum import Enum
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator


class HarnessTransport(str, Enum):
    """How the environment talks to the harness process."""

    STDIO = "stdio"
    STREAMABLE_HTTP = "http"
    MCP = "mcp"


class HarnessConfig(BaseModel):
    """A harness to start fresh on every `reset()`.

    `session_timeout_s` bounds one turn (one `step`), not the episode. `model_url` is the
    OpenAI- or Anthropic-compatible endpoint the trainer gives; the harness never sees it
    directly: its calls go through the recording proxy (`openenv.core.harness.capture`).
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    command: list[str] = Field(default_factory=list)
    working_directory: str = "/workspace"
    env_vars: dict[str, str] = Field(default_factory=dict)
    transport: HarnessTransport = HarnessTransport.STDIO
    mcp_config_path: Optional[str] = None
    startup_timeout_s: float = Field(default=30.0, gt=0)
    session_timeout_s: float = Field(default=600.0, gt=0)
    model: Optional[str] = None
    api_key_env_var: Optional[str] = None
    model_url: Optional[str] = None

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a harness needs a name")
        return value

    def api_key(self) -> str:
        """The value of `api_key_env_var`, from `env_vars` or else the host's environment;
        "" when no variable is named or it is unset."""
        variable = self.api_key_env_var
        if not variable:
            return ""
        return str(self.env_vars.get(variable) or os.environ.get(variable, ""))
