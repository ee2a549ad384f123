"""An MCP environment whose non-tool actions use its own in-process fastmcp client, as OpenEnv's
environments may, and report whether the client exists and is connected (for
tests/mcp/test_lazy_mcp_client.py). `app` connects the client at its first use (the default),
`eager_app` as each session starts (`connect_mcp_client_at_start`, as OpenEnv does)."""

from __future__ import annotations

from typing import Any, Literal

from fastmcp import Context, FastMCP

from openenv.core.env_server import Action, MCPEnvironment, Observation, State, create_app

from ._instances import ENVS


class ClientOp(Action):
    type: Literal["client_op"] = "client_op"
    #: "use": call the `bump` tool through `mcp_session()`; "probe": report the client.
    op: Literal["use", "probe"]


def client_status(env: MCPEnvironment) -> dict[str, Any]:
    client = env.__dict__.get("_mcp_client")
    return {"made": client is not None, "connected": bool(client and client.is_connected())}


class HeldClientEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("held_client")

        @mcp.tool
        async def bump(ctx: Context) -> int:
            """Count the calls made in this MCP session (its state lives as long as it does)."""
            count = (await ctx.get_state("count") or 0) + 1
            await ctx.set_state("count", count)
            return count

        super().__init__(mcp)
        self._state = State(episode_id="held", step_count=0)
        self.used_client: Any = None
        # In a module that is not executed again with the app (tests/support/server.py
        # `load_app`), so a test can look at the environments after their session closed.
        ENVS.append(self)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any):  # type: ignore[override]
        return Observation(done=False, reward=0.0, metadata=client_status(self))

    async def _step_impl_async(  # type: ignore[override]
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        assert isinstance(action, ClientOp)
        metadata: dict[str, Any] = {}
        if action.op == "use":
            async with self.mcp_session() as client:
                metadata["count"] = (await client.call_tool("bump", {})).data
            self.used_client = client
        return Observation(done=False, reward=0.0, metadata={**metadata, **client_status(self)})

    @property
    def state(self) -> State:
        return self._state


class EagerHeldClientEnvironment(HeldClientEnvironment):
    connect_mcp_client_at_start = True


app = create_app(HeldClientEnvironment, ClientOp, Observation, env_name="held_client")
eager_app = create_app(EagerHeldClientEnvironment, ClientOp, Observation, env_name="held_client")
