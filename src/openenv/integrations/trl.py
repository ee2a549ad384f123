"""TRL's `GRPOTrainer` against environments served by this project.

`rollout_func(...)` returns what `GRPOTrainer(rollout_func=...)` calls: for every prompt it
opens a session on the served environment (`EnvSessionFactory`, one WebSocket session per
episode), builds the model's prompt from the reset observation, samples a completion with the
trainer's own model (`model.generate`, so it works on CPU without vLLM), steps the environment
with it and returns the environment's reward under `env_reward`. `env_reward` is the matching
reward function. Episodes run through `build_harness_rollout_func`, so an environment that
fails mid-batch is retried and then refuses the batch with `RolloutInfrastructureError`
instead of being scored 0.

torch and TRL are imported when a rollout runs, not when this module is imported.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from openenv.core.env_server.mcp_types import Tool
from openenv.core.harness.rollout import (
    HarnessAdapter,
    HarnessRolloutResult,
    HarnessRunLimits,
    Message,
    ModelStep,
    ModelStepResult,
    ResourceSession,
    RolloutEvent,
    RolloutInfrastructureError,
    ToolTraceEntry,
    build_harness_rollout_func,
)
from openenv.core.harness.sessions import ACT_TOOL, EnvSessionFactory
from openenv.core.llm_client import LLMResponse

__all__ = [
    "RolloutInfrastructureError",
    "SingleTurnAdapter",
    "TrainerModelStep",
    "env_reward",
    "rollout_func",
]

PromptBuilder = Callable[[list[Message], Any], str]


def messages_as_text(messages: list[Message], tokenizer: Any) -> str:
    """The chat template when the tokenizer has one, else the messages' contents."""
    if getattr(tokenizer, "chat_template", None):
        return str(
            tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        )
    return "\n\n".join(str(m.get("content") or "") for m in messages)


class SingleTurnAdapter(HarnessAdapter):
    """One model turn per episode: the completion's text becomes one tool call (`act` for a
    reset/step environment: `argument` names the action field it fills). Fits environments
    that score an answer, and models that were never taught a tool-call format."""

    def __init__(self, argument: str, tool: str = ACT_TOOL) -> None:
        self.argument = argument
        self.tool = tool

    def run_white_box(
        self,
        model_step: ModelStep,
        session: ResourceSession,
        limits: HarnessRunLimits | None = None,
    ) -> HarnessRolloutResult:
        limits = limits or HarnessRunLimits()
        messages = list(session.initial_messages())
        step = model_step(messages, session.list_tools(), dict(limits.sampling))
        text = step.response.content or ""
        messages.append(step.response.to_message_dict())
        arguments = {self.argument: text}
        # A failure here is the environment's (the completion is any text): it propagates and
        # the rollout layer counts it as an infrastructure failure.
        tool_result = session.call_tool(self.tool, arguments)
        return HarnessRolloutResult(
            messages=messages,
            tool_trace=[ToolTraceEntry(self.tool, arguments, tool_result)],
            events=[RolloutEvent("model_response", {"turn": 0, "content": text})],
            done=True,
            metrics={"turns": 1, "tool_calls": 1, "stop_reason": "single_turn"},
            prompt_ids=list(step.prompt_ids),
            completion_ids=list(step.completion_ids),
            logprobs=list(step.logprobs),
        )

    def run_black_box(
        self, session: ResourceSession, limits: HarnessRunLimits | None = None
    ) -> HarnessRolloutResult:
        raise NotImplementedError("SingleTurnAdapter samples the trainer's model (white-box)")


class TrainerModelStep:
    """A `ModelStep` that samples the trainer's model with the trainer's sampling settings
    (`temperature`, `top_p`, `top_k`, `max_completion_length`) and keeps the token ids and
    per-token logprobs of what it sampled."""

    # One generate at a time: episodes may run on several threads, the model is shared.
    _lock = threading.Lock()

    def __init__(self, trainer: Any, prompt_builder: PromptBuilder | None = None) -> None:
        self.trainer = trainer
        self.tokenizer = trainer.processing_class
        self.prompt_builder = prompt_builder

    def __call__(
        self, messages: list[Message], tools: list[Tool], sampling: dict[str, Any]
    ) -> ModelStepResult:
        import torch

        if self.prompt_builder is not None:
            text = self.prompt_builder(messages, self.tokenizer)
        else:
            text = messages_as_text(messages, self.tokenizer)
        args = self.trainer.args
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        prompt_ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        max_prompt = getattr(args, "max_prompt_length", None)
        if max_prompt:
            prompt_ids = prompt_ids[-max_prompt:]
        settings = {
            "do_sample": True,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "top_k": args.top_k or 0,
            "max_new_tokens": args.max_completion_length,
            **sampling,
        }
        pad_id = self.tokenizer.pad_token_id
        eos_id = self.tokenizer.eos_token_id
        with self._lock, torch.no_grad():
            device = next(model.parameters()).device
            input_ids = torch.tensor([prompt_ids], device=device)
            was_training = model.training
            model.eval()
            try:
                out = model.generate(
                    input_ids=input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    pad_token_id=pad_id if pad_id is not None else eos_id,
                    eos_token_id=eos_id,
                    output_scores=True,
                    return_dict_in_generate=True,
                    **settings,
                )
            finally:
                model.train(was_training)
        completion = out.sequences[0, len(prompt_ids) :].tolist()
        logprobs = [
            float(torch.log_softmax(scores[0].float(), dim=-1)[token])
            for scores, token in zip(out.scores, completion, strict=False)
        ]
        completion = completion[: len(logprobs)]
        # Stop at the end-of-sequence token (kept, as TRL keeps it; the padding after it dropped).
        if eos_id is not None and eos_id in completion:
            end = completion.index(eos_id) + 1
            completion, logprobs = completion[:end], logprobs[:end]
        content = self.tokenizer.decode(completion, skip_special_tokens=True)
        return ModelStepResult(
            response=LLMResponse(content=content),
            prompt_ids=list(prompt_ids),
            completion_ids=completion,
            logprobs=logprobs,
        )


def rollout_func(
    base_url: str | None = None,
    *,
    session_factory: Any = None,
    argument: str = "answer",
    tool: str = ACT_TOOL,
    harness_adapter: HarnessAdapter | None = None,
    prompt_builder: PromptBuilder | None = None,
    task_builder: Callable[[Any], Any] | None = None,
    limits: HarnessRunLimits | None = None,
    max_concurrency: int = 1,
    infra_retries: int = 2,
    system_prompt: str | None = None,
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """A `GRPOTrainer` `rollout_func(prompts, trainer)` over a served environment.

    `base_url` (or a `session_factory`, e.g. an `EnvSessionFactory` with a typed
    `client_factory`) is the environment. Each prompt is one episode: `task_builder(prompt)`
    is its task (a dict's `seed`/`reset_kwargs` go to reset); the default adapter is
    `SingleTurnAdapter(argument, tool)` (the completion fills the action field `argument`);
    pass `MCPHarnessAdapter()` for a model that calls tools itself. `prompt_builder(messages,
    tokenizer)` turns the reset messages into the model's input (default: the chat template,
    else the contents).

    The result has TRL's `prompt_ids`, `completion_ids`, `logprobs` and, for reward
    functions, `env_reward`, `verify_metrics`, `infra_failed`, `rollout_errors`. An
    infrastructure failure is retried `infra_retries` times, then the batch raises
    `RolloutInfrastructureError` (TRL would score a missing reward 0).
    """
    if (base_url is None) == (session_factory is None):
        raise ValueError("give either base_url or session_factory")
    factory = session_factory or EnvSessionFactory(base_url, system_prompt=system_prompt)
    if task_builder is not None:
        factory = _TaskMapping(factory, task_builder)
    return build_harness_rollout_func(
        session_factory=factory,
        harness_adapter=harness_adapter or SingleTurnAdapter(argument, tool),
        model_step_builder=lambda trainer, session: TrainerModelStep(trainer, prompt_builder),
        limits=limits,
        reward_key="env_reward",
        max_concurrency=max_concurrency,
        infra_retries=infra_retries,
        on_infra_failure="raise",
    )


class _TaskMapping:
    """A session factory whose task is built from TRL's prompt."""

    def __init__(self, factory: Any, task_builder: Callable[[Any], Any]) -> None:
        self._factory = factory
        self._task_builder = task_builder

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> Any:
        return self._factory.create(self._task_builder(task), seed=seed, episode_id=episode_id)


def env_reward(
    completions: list[Any], env_reward: list[float | None] | None = None, **kwargs: Any
) -> list[float | None]:
    """The reward function for `rollout_func`: the environment's reward, as it returned it.

    TRL scores a completion whose every reward is `None` as 0, so a missing reward (no
    `env_reward` field, or an episode the environment gave no reward) is refused here."""
    if env_reward is None:
        raise ValueError("no env_reward field: pass openenv.integrations.trl.rollout_func(...)")
    if len(env_reward) != len(completions):
        raise ValueError(f"{len(env_reward)} env rewards for {len(completions)} completions")
    missing = [i for i, reward in enumerate(env_reward) if reward is None]
    if missing:
        errors = kwargs.get("rollout_errors") or [None] * len(env_reward)
        listed = "; ".join(f"completion {i}: {errors[i] or 'no reward'}" for i in missing)
        raise ValueError(f"the environment gave no reward: {listed}")
    return [float(reward) for reward in env_reward if reward is not None]
