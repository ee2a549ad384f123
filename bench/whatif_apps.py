"""Variants of our environments, to size the changes suggested in README.md.

They change the environment side only (src/ is untouched) and are started by bench.py when named
in `--only` (targets `ours-plain-onloop`, `ours-echo-direct`, `ours-echo-shared`):

- `plain_onloop`: the plain environment with `RUNS_ON_EVENT_LOOP = True` (the opt-in of
  `Environment`), so the server calls its sync methods on the event loop instead of its thread
  pool. With an older src/ without the flag, `step_async`/`reset_async` overrides do the same.
- `echo_direct`: the echo environment calling the resolved fastmcp tool directly
  (`tool._run(arguments)`, tool cached per session) instead of `FastMCP.call_tool`, which runs
  middleware, auth and visibility checks, telemetry spans and a Context on every call.
- `echo_shared`: the echo environment with one FastMCP server (its tools are stateless) shared by
  every session instead of one built per session (idle memory per session).
- `echo_calltool`: the echo environment with every tool call through `FastMCP.call_tool`, as
  before the direct call of `mcp_fast_call.py` (issue 18 item 1, before/after).
- `echo_nofreeze`, `plain_nofreeze`: the servers without the session heap freezing of
  `session_gc.py` (`OPENENV_SESSION_GC_FREEZE=0`; issue 18 item 2, before/after).
- `echo_noyoung`, `plain_noyoung`: the servers with CPython's young-generation threshold left
  as it is instead of sized to the live sessions (`OPENENV_SESSION_GC_YOUNG=0`; item 2).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any
from uuid import uuid4

from echo_env.server.echo_environment import EchoEnvironment, _build_tools
from openenv.core.env_server import (
    CallToolAction,
    CallToolObservation,
    Environment,
    State,
    create_app,
)
from openenv.core.env_server.mcp_environment import (
    MCP_TOOL_CALL_TIMEOUT,
    MCPEnvironment,
    ToolCallFailed,
    classify_tool_exception,
)
from openenv.core.env_server.mcp_types import ToolErrorType
from plain_env import PlainAction, PlainEnvironment, PlainObservation

MAX_ENVS = int(os.environ.get("MAX_CONCURRENT_ENVS", "16384"))


class OnLoopPlainEnvironment(PlainEnvironment):
    RUNS_ON_EVENT_LOOP = True


if not hasattr(Environment, "RUNS_ON_EVENT_LOOP"):  # src/ before the opt-in existed

    class OnLoopPlainEnvironment(PlainEnvironment):  # type: ignore[no-redef]
        async def reset_async(
            self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
        ) -> PlainObservation:
            return self.reset(seed=seed, episode_id=episode_id)

        async def step_async(
            self, action: PlainAction, timeout_s: float | None = None, **kwargs: Any
        ) -> PlainObservation:
            return self.step(action)


class DirectEchoEnvironment(EchoEnvironment):
    def __init__(self) -> None:
        super().__init__()
        self._direct: dict[str, Any] = {}

    async def call_tool_raw(
        self, name: str, arguments: dict[str, Any] | None = None, timeout_s: float | None = None
    ) -> Any:
        tool = self._direct.get(name)
        if tool is None:
            found = await self.mcp_server.get_tool(name)
            if found is None:  # unknown tools keep the normal path and its error
                return await super().call_tool_raw(name, arguments, timeout_s)
            tool = self._direct[name] = found
        limit = timeout_s or MCP_TOOL_CALL_TIMEOUT
        try:
            async with asyncio.timeout(limit):
                return await tool._run(arguments or {})
        except (TimeoutError, asyncio.TimeoutError):
            raise ToolCallFailed(
                ToolErrorType.TIMEOUT, f"Tool '{name}' timed out after {limit:g} seconds"
            ) from None
        except Exception as exc:
            raise classify_tool_exception(name, exc) from exc


class CallToolEchoEnvironment(EchoEnvironment):
    async def _call_server_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return await self.mcp_server.call_tool(name, arguments)


_SHARED_TOOLS = _build_tools()


class SharedEchoEnvironment(EchoEnvironment):
    def __init__(self) -> None:
        MCPEnvironment.__init__(self, _SHARED_TOOLS)
        self._state = State(episode_id=str(uuid4()), step_count=0)


def _echo_app(env: type) -> Any:
    return create_app(
        env, CallToolAction, CallToolObservation, env_name="echo_env", max_concurrent_envs=MAX_ENVS
    )


plain_onloop = create_app(
    OnLoopPlainEnvironment,
    PlainAction,
    PlainObservation,
    env_name="plain_env",
    max_concurrent_envs=MAX_ENVS,
)
echo_direct = _echo_app(DirectEchoEnvironment)
echo_calltool = _echo_app(CallToolEchoEnvironment)


def _switched_off(variable: str, build: Any) -> Any:
    os.environ[variable] = "0"  # read when the app's SessionManager is made
    try:
        return build()
    finally:
        del os.environ[variable]


def _plain_app() -> Any:
    return create_app(
        PlainEnvironment,
        PlainAction,
        PlainObservation,
        env_name="plain_env",
        max_concurrent_envs=MAX_ENVS,
    )


echo_nofreeze = _switched_off("OPENENV_SESSION_GC_FREEZE", lambda: _echo_app(EchoEnvironment))
plain_nofreeze = _switched_off("OPENENV_SESSION_GC_FREEZE", _plain_app)
echo_noyoung = _switched_off("OPENENV_SESSION_GC_YOUNG", lambda: _echo_app(EchoEnvironment))
plain_noyoung = _switched_off("OPENENV_SESSION_GC_YOUNG", _plain_app)
echo_shared = _echo_app(SharedEchoEnvironment)
