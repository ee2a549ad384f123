"""`EnvEvalHarness`: a chat model with tool calling, evaluated on a served environment."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from openenv.core.llm_client import LLMClient

from .base import EvalHarness, EvalTask, TaskResult, TaskSpec, normalize_tasks
from .episode import EnvEpisode, RewardMode
from .tasks import known_tasks

__all__ = ["EnvEvalHarness"]


class EnvEvalHarness(EvalHarness):
    """Evaluate ``model`` (an `OpenAIClient` / `AnthropicClient` or any `LLMClient` with tool
    calling) on the environment served at ``base_url``, or on ``env`` (an installed
    environment's name, started with `AutoEnv` for the evaluation and stopped after it).

    The model gets the environment's MCP tools, or one tool (``act``) whose arguments are the
    action; each tool call is one step. An episode ends when the environment says done, when
    the model answers without calling a tool, or after ``max_turns`` model replies (then it is
    scored as it stands, ``done`` false). The task set is ``tasks`` (task ids, seeds, reset
    kwargs or `EvalTask`s), else the environment's shipped tasks when it lists them
    (terminal_env, repo_env, coding_env). Each task runs on its own session, up to
    ``max_concurrency`` at once (mind the server's ``max_concurrent_envs``).
    """

    def __init__(
        self,
        env: str | None = None,
        *,
        model: LLMClient,
        base_url: str | None = None,
        tasks: Sequence[TaskSpec] | None = None,
        max_turns: int = 20,
        max_concurrency: int = 4,
        system_prompt: str | None = None,
        reward_mode: RewardMode = "sum",
        success_threshold: float = 1.0,
        keep_transcripts: bool = True,
        client_kwargs: Mapping[str, Any] | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if env is None and base_url is None:
            raise ValueError("EnvEvalHarness needs base_url= (a served environment) or env=")
        if max_turns < 1:
            raise ValueError("max_turns must be >= 1")
        self.env = env
        self.base_url = base_url
        self.model = model
        self.tasks = normalize_tasks(tasks) if tasks is not None else None
        self.max_turns = max_turns
        self.max_concurrency = max_concurrency
        self.system_prompt = system_prompt
        self.reward_mode: RewardMode = reward_mode
        self.success_threshold = success_threshold
        self.keep_transcripts = keep_transcripts
        self.client_kwargs = dict(client_kwargs or {})
        self.env_kwargs = dict(env_kwargs or {})

    def default_tasks(self) -> list[EvalTask]:
        if self.tasks is not None:
            return list(self.tasks)
        if self.env is not None:
            listed = known_tasks(self.env)
            if listed:
                return listed
        raise ValueError(
            f"no task set for {self.env or self.base_url}: pass tasks= (task ids, seeds or "
            "reset kwargs)"
        )

    def describe(self) -> dict[str, Any]:
        return {
            "model": getattr(self.model, "model", None) or type(self.model).__name__,
            "environment": self.env or self.base_url,
            "max_turns": self.max_turns,
            "reward_mode": self.reward_mode,
            "success_threshold": self.success_threshold,
        }

    async def aevaluate(
        self,
        tasks: Sequence[TaskSpec] | TaskSpec | None = None,
        *,
        max_concurrency: int | None = None,
    ) -> Any:
        if self.base_url is not None:
            return await super().aevaluate(tasks, max_concurrency=max_concurrency)
        owner = await asyncio.to_thread(self._start_env)
        try:
            self.base_url = owner.base_url
            return await super().aevaluate(tasks, max_concurrency=max_concurrency)
        finally:
            self.base_url = None
            await owner.close()

    def _start_env(self) -> Any:
        from openenv.auto import AutoEnv

        assert self.env is not None
        return AutoEnv.from_env(self.env, **self.env_kwargs)

    async def run_task(self, task: EvalTask) -> TaskResult:
        assert self.base_url is not None
        started = time.monotonic()
        async with EnvEpisode(
            self.base_url, reward_mode=self.reward_mode, client_kwargs=self.client_kwargs
        ) as episode:
            prompt = await episode.start(task.reset_kwargs)
            messages: list[dict[str, Any]] = []
            if self.system_prompt:
                messages.append({"role": "system", "content": self.system_prompt})
            messages.append({"role": "user", "content": prompt})
            turns = 0
            stop = "done" if episode.done else "max_turns"
            while not episode.done and turns < self.max_turns:
                reply = await self.model.complete_with_tools(messages, episode.tools)
                turns += 1
                messages.append(reply.to_message_dict())
                if not reply.tool_calls:
                    stop = "no_tool_call"
                    break
                for call in reply.tool_calls:
                    output = await episode.call(call.name, call.args)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
                if episode.done:
                    stop = "done"
            reward = episode.reward
            return TaskResult(
                task_id=task.id,
                status="scored",
                reward=reward,
                success=reward >= self.success_threshold,
                done=episode.done,
                turns=turns,
                step_rewards=list(episode.step_rewards),
                reset_kwargs=dict(task.reset_kwargs),
                duration_s=time.monotonic() - started,
                metadata={
                    **task.metadata,
                    "stop_reason": stop,
                    "final_metadata": episode.last_metadata,
                },
                transcript=messages if self.keep_transcripts else None,
            )
