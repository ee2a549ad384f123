"""A served environment as an Inspect AI task (needs the ``evals`` extra: ``inspect-ai``).

``openenv_task(env, tasks=..., base_url=...)`` builds a `Task`: one `Sample` per task of the
environment's task set, a solver that plays the episode against the server with whatever model
Inspect is given (``get_model()``; any Inspect provider), and a scorer that reports the
environment's reward. An episode that could not run (the server is gone, the sandbox failed)
raises, so Inspect records the sample as an error, not as a 0; the task sets
``fail_on_error=False`` so the other samples still run.

From Python::

    from inspect_ai import eval
    from openenv.evals.inspect import openenv_task

    eval(openenv_task("terminal", tasks=["create-greeting"], base_url="http://127.0.0.1:8000"),
         model="openai-api/local/my-model", log_dir="logs")

From the shell (the package registers its tasks with Inspect)::

    LOCAL_BASE_URL=http://127.0.0.1:9000/v1 LOCAL_API_KEY=unused \\
    inspect eval openenv/openenv_task -T env=terminal -T tasks=create-greeting \\
        -T base_url=http://127.0.0.1:8000 --model openai-api/local/my-model --log-dir logs
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessage, ChatMessageSystem, ChatMessageTool, ChatMessageUser
from inspect_ai.model import get_model as _get_model
from inspect_ai.scorer import (
    SampleScore,
    Score,
    Scorer,
    Target,
    Value,
    mean,
    metric,
    scorer,
    stderr,
)
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.tool import ToolChoice, ToolFunction, ToolInfo, ToolParams

from openenv.core.llm_client import to_openai_tool

from .base import EvalTask, TaskSpec, normalize_tasks
from .episode import EnvEpisode, RewardMode
from .tasks import known_tasks

__all__ = [
    "STORE_KEY",
    "openenv_reward",
    "openenv_solver",
    "openenv_task",
    "success_rate",
]

#: How the model must use the environment's tools each turn: ``auto`` (the model decides; a
#: reply without a tool call ends the episode), ``any`` (a tool call every turn: OpenAI's
#: ``tool_choice: "required"``, which small models that rarely call tools on their own need)
#: or the name of one of the environment's tools (that tool every turn).
ToolChoiceMode = Literal["auto", "any", "required"]

#: Where the solver leaves the episode's outcome in the sample's store, for the scorer.
STORE_KEY = "openenv"


def _tool_info(tool: Mapping[str, Any]) -> ToolInfo:
    function = to_openai_tool(tool)["function"]
    return ToolInfo(
        name=function["name"],
        description=function["description"] or function["name"],
        parameters=ToolParams.model_validate(function["parameters"]),
    )


@solver
def openenv_solver(
    base_url: str,
    max_turns: int = 20,
    system_prompt: str | None = None,
    reward_mode: RewardMode = "sum",
    success_threshold: float = 1.0,
    client_kwargs: dict[str, Any] | None = None,
    tool_choice: ToolChoiceMode | str = "auto",
) -> Solver:
    """Play the sample's task on the environment at ``base_url`` with Inspect's model: each
    tool call is one step; stops when the environment is done, the model calls no tool, or
    after ``max_turns`` replies. ``tool_choice="any"`` (or ``"required"``, or a tool's name)
    makes the model call a tool every turn."""
    if not isinstance(tool_choice, str) or not tool_choice:
        raise ValueError(f"tool_choice must be a non-empty string, not {tool_choice!r}")

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        del generate  # the tools are the environment's: this loop calls them itself
        model = _get_model()
        reset_kwargs = dict(state.metadata.get("reset_kwargs") or {})
        async with EnvEpisode(
            base_url, reward_mode=reward_mode, client_kwargs=client_kwargs
        ) as episode:
            prompt = await episode.start(reset_kwargs)
            tools = [_tool_info(tool) for tool in episode.tools]
            choice = _tool_choice(tool_choice, tools)
            messages: list[ChatMessage] = []
            if system_prompt:
                messages.append(ChatMessageSystem(content=system_prompt))
            messages.append(ChatMessageUser(content=prompt))
            state.messages = messages
            turns = 0
            stop = "done" if episode.done else "max_turns"
            while not episode.done and turns < max_turns:
                output = await model.generate(state.messages, tools=tools, tool_choice=choice)
                state.output = output
                turns += 1
                reply = output.message
                state.messages.append(reply)
                if not reply.tool_calls:
                    stop = "no_tool_call"
                    break
                for call in reply.tool_calls:
                    if call.parse_error:
                        text = f"error: the arguments are not valid JSON: {call.parse_error}"
                    else:
                        text = await episode.call(call.function, call.arguments)
                    state.messages.append(
                        ChatMessageTool(content=text, tool_call_id=call.id, function=call.function)
                    )
                if episode.done:
                    stop = "done"
            reward = episode.reward
            state.store.set(
                STORE_KEY,
                {
                    "reward": reward,
                    "success": reward >= success_threshold,
                    "done": episode.done,
                    "turns": turns,
                    "stop_reason": stop,
                    "step_rewards": list(episode.step_rewards),
                },
            )
        return state

    return solve


def _tool_choice(value: str, tools: Sequence[ToolInfo]) -> ToolChoice:
    """Inspect's tool choice for ``value``: ``auto``, ``any`` (``required``) or a tool's name."""
    if value == "auto":
        return "auto"
    if value in ("any", "required"):  # "required" is OpenAI's name for Inspect's "any"
        return "any"
    if value in {tool.name for tool in tools}:
        return ToolFunction(name=value)
    names = ", ".join(sorted(tool.name for tool in tools))
    raise ValueError(
        f"tool_choice must be 'auto', 'any' (or 'required') or one of the environment's "
        f"tools ({names}), not {value!r}"
    )


@metric
def success_rate() -> Any:
    """Fraction of scored samples whose reward reached the task's success threshold."""

    def compute(scores: list[SampleScore]) -> Value:
        flags = [bool((s.score.metadata or {}).get("success")) for s in scores]
        return sum(flags) / len(flags) if flags else 0.0

    return compute


@scorer(metrics=[mean(), stderr(), success_rate()])
def openenv_reward() -> Scorer:
    """The environment's reward for the episode the solver played."""

    async def score(state: TaskState, target: Target) -> Score:
        del target  # the environment is the judge
        outcome = state.store.get(STORE_KEY)
        if outcome is None:
            raise RuntimeError("no OpenEnv episode ran for this sample (use openenv_solver)")
        return Score(
            value=outcome["reward"],
            explanation=f"{outcome['stop_reason']} after {outcome['turns']} model turns",
            metadata=outcome,
        )

    return score


def _task_list(env: str | None, tasks: Any) -> list[EvalTask]:
    if tasks is None:
        listed = known_tasks(env) if env else None
        if not listed:
            raise ValueError(
                f"no task set for {env or 'this environment'}: pass tasks= (task ids, seeds or "
                "reset kwargs)"
            )
        return listed
    if isinstance(tasks, str):  # from the command line: -T tasks=a,b or -T tasks=1,2
        parts = [part.strip() for part in tasks.split(",") if part.strip()]
        tasks = [int(part) if part.lstrip("-").isdigit() else part for part in parts]
    specs: Sequence[TaskSpec] = tasks if isinstance(tasks, Sequence) else [tasks]
    return normalize_tasks(specs)


@task
def openenv_task(
    env: str | None = None,
    tasks: Any = None,
    base_url: str | None = None,
    max_turns: int = 20,
    system_prompt: str | None = None,
    reward_mode: RewardMode = "sum",
    success_threshold: float = 1.0,
    client_kwargs: dict[str, Any] | None = None,
    tool_choice: ToolChoiceMode | str = "auto",
) -> Task:
    """The environment served at ``base_url`` as an Inspect task over ``tasks`` (task ids,
    seeds, reset kwargs or `EvalTask`s; default: the shipped task set of ``env``).
    ``client_kwargs`` go to each session's `GenericEnvClient` (``api_key``, timeouts).
    ``tool_choice="any"`` (``-T tool_choice=any``) makes the model call a tool every turn."""
    if not base_url:
        raise ValueError(
            "openenv_task needs base_url=: the URL of the running environment server "
            "(e.g. `uv run python -m terminal_env.server.mcp_app --port 8000`)"
        )
    samples = [
        Sample(
            id=item.id,
            input=f"OpenEnv task {item.id}",  # replaced by the environment's prompt on reset
            metadata={**item.metadata, "reset_kwargs": dict(item.reset_kwargs)},
        )
        for item in _task_list(env, tasks)
    ]
    return Task(
        dataset=MemoryDataset(samples, name=env or "openenv"),
        solver=openenv_solver(
            base_url=base_url,
            max_turns=max_turns,
            system_prompt=system_prompt,
            reward_mode=reward_mode,
            success_threshold=success_threshold,
            client_kwargs=client_kwargs,
            tool_choice=tool_choice,
        ),
        scorer=openenv_reward(),
        fail_on_error=False,
        name=f"openenv/{env}" if env else "openenv",
        metadata={"environment": env, "base_url": base_url},
    )
