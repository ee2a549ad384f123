"""A server of `HarnessEnvironment` with the echo test harness (`OPENENV_MODE` picks the mode)."""

from __future__ import annotations

import tempfile

from fastmcp import FastMCP

from openenv.core.env_server import create_app
from openenv.core.env_server.types import Observation
from openenv.core.harness.environment import HarnessAction, HarnessEnvironment
from tests.harness.echo_adapter import EchoAdapter


def tools() -> FastMCP:
    mcp = FastMCP(name="echo-harness-tools")

    @mcp.tool
    def echo(text: str) -> str:
        """Clashes with the harness's own `echo`: injected as `env_echo`."""
        return f"env:{text}"

    @mcp.tool
    def add(a: int, b: int) -> int:
        return a + b

    return mcp


def make_env() -> HarnessEnvironment:
    return HarnessEnvironment(EchoAdapter(tempfile.gettempdir()), tools())


app = create_app(make_env, HarnessAction, Observation, env_name="echo_harness")
