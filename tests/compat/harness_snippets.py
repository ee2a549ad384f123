"""Harness code written the way OpenEnv 0.10's `openenv.core.harness` reads (RFC 005 environment,
tool-name resolution, a white-box rollout, a failed turn). tests/compat/test_harness_api.py runs it
with the published package and with ours and compares the printed JSON."""

import json

from fastmcp import FastMCP

from openenv.core.env_server.mcp_types import Tool
from openenv.core.harness import (
    AgenticHarnessAdapter,
    HarnessAction,
    HarnessConfig,
    HarnessEnvironment,
    HarnessError,
    HarnessEvent,
    HarnessEventType,
    HarnessRunLimits,
    MCPHarnessAdapter,
    ModelStepResult,
    ResourceSession,
    ToolResult,
    VerifyResult,
    resolve_tool_conflicts,
)
from openenv.core.llm_client import LLMResponse, ToolCall


class Scripted(AgenticHarnessAdapter):
    """Answers each message itself; the second turn ends the episode."""

    BUILTIN_TOOL_NAMES = frozenset({"add"})

    def __init__(self, config):
        super().__init__(config)
        self.alive, self.turns, self.tools, self.url = False, 0, None, None

    async def start(self, working_directory):
        self.alive, self.turns = True, 0

    async def stop(self):
        self.alive = False

    async def inject_tools(self, tools, bridge_url=None):
        self.tools, self.url = [t.name for t in tools], bridge_url

    async def is_alive(self):
        return self.alive

    async def send_message_streaming(self, message):
        self.turns += 1
        yield HarnessEvent(type=HarnessEventType.TEXT_OUTPUT, data={"text": message})
        response = f"turn {self.turns}: {message}"
        yield HarnessEvent(
            type=HarnessEventType.TURN_COMPLETE,
            data={"response": response, "done": self.turns >= 2},
        )


class Crashing(Scripted):
    async def send_message_streaming(self, message):
        raise HarnessError("the agent died")
        yield  # an async generator


def tool(name, schema=None):
    return Tool(name=name, description=name, input_schema=schema or {})


mcp = FastMCP("t")


@mcp.tool
def add(a: int, b: int) -> int:
    return a + b


out = {}
adapter = Scripted(HarnessConfig(name="s", command=["x"]))
env = HarnessEnvironment(adapter, mcp=mcp)
obs = env.reset()
out["reset"] = [obs.done, obs.reward, sorted(obs.metadata)]
out["injected"] = [adapter.tools, bool(adapter.url)]
first = env.step(HarnessAction(message="hi"))
second = env.step(HarnessAction(message="again"))
events = [e["type"] for e in first.metadata["turn_events"]]
meta = first.metadata
out["t1"] = [first.done, first.reward, meta["response"], meta["turn_number"], events]
out["t2"] = [second.done, second.metadata["response"], env.state.step_count]
env.close()

out["resolve"] = [t.name for t in resolve_tool_conflicts([tool("add"), tool("sub")], {"add"})]
try:
    resolve_tool_conflicts([tool("reset")], set())
except ValueError:
    out["reserved"] = "ValueError"


class Session(ResourceSession):
    def initial_messages(self):
        return [{"role": "user", "content": "add 2 and 3"}]

    def list_tools(self):
        integer = {"type": "integer"}
        return [tool("add", {"type": "object", "properties": {"a": integer, "b": integer}})]

    def call_tool(self, name, arguments):
        total = arguments["a"] + arguments["b"]
        return ToolResult(data=total, done=True, metadata={"reward": 1.0})

    def verify(self, transcript, final_state=None):
        return VerifyResult(env_reward=1.0, done=True)

    def close(self):
        pass


def model_step(messages, tools, sampling):
    call = ToolCall(id="c1", name="add", args={"a": 2, "b": 3})
    return ModelStepResult(response=LLMResponse(content="", tool_calls=[call]))


run = MCPHarnessAdapter().run_white_box(model_step, Session(), HarnessRunLimits(max_turns=3))
out["white_box"] = [
    run.done,
    run.metrics.get("turns"),
    run.metrics.get("tool_calls"),
    [m["role"] for m in run.messages],
    [entry.result.data for entry in run.tool_trace],
]

env = HarnessEnvironment(Crashing(HarnessConfig(name="c", command=["x"])), mcp=FastMCP("c"))
env.reset()
crashed = env.step(HarnessAction(message="hi"))
out["crash"] = {
    "done": crashed.done,
    "reward": crashed.reward,
    "error_type": crashed.metadata.get("error_type"),
    "category": crashed.metadata.get("category"),
    "events": [e["type"] for e in crashed.metadata["turn_events"]],
}
env.close()
print(json.dumps(out, default=str))
