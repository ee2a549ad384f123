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
    as_text,
    build_harness_rollout_func,
    is_model_error,
    tool_result_reward,
)
from openenv.core.harness.sessions import ACT_TOOL, EnvSessionFactory, FleetSessionFactory
from openenv.core.llm_client import LLMResponse

__all__ = [
    "RolloutInfrastructureError",
    "ServedEnvironment",
    "SingleTurnAdapter",
    "TrainerModelStep",
    "close_environments",
    "env_reward",
    "environment_factory",
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
    that score an answer, and models that were never taught a tool-call format.

    `parse(text)`, when given, turns the completion's text into the argument (e.g. the last
    number of a chatty reply); the environment still scores what it is sent. By default the
    text is sent as it is."""

    def __init__(
        self,
        argument: str,
        tool: str = ACT_TOOL,
        parse: Callable[[str], str] | None = None,
    ) -> None:
        self.argument = argument
        self.tool = tool
        self.parse = parse

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
        arguments = {self.argument: text if self.parse is None else self.parse(text)}
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
    fleet: Any = None,
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

    `base_url`, a `fleet` (an `EnvFleet` or its `.sync()` twin: each episode acquires a
    session on the least-loaded live server and releases it after) or a `session_factory`
    (e.g. an `EnvSessionFactory` with a typed `client_factory`) is the environment. Each
    prompt is one episode: `task_builder(prompt)` is its task (a dict's `seed`/`reset_kwargs`
    go to reset); the default adapter is `SingleTurnAdapter(argument, tool)` (the completion
    fills the action field `argument`);
    pass `MCPHarnessAdapter()` for a model that calls tools itself. `prompt_builder(messages,
    tokenizer)` turns the reset messages into the model's input (default: the chat template,
    else the contents).

    The result has TRL's `prompt_ids`, `completion_ids`, `logprobs` and, for reward
    functions, `env_reward`, `verify_metrics`, `infra_failed`, `rollout_errors`. An
    infrastructure failure (an episode on a server the fleet lost included) is retried
    `infra_retries` times, on a live server, then the batch raises
    `RolloutInfrastructureError` (TRL would score a missing reward 0).
    """
    factory = session_factory
    if factory is None:
        factory = _sessions(base_url, fleet, system_prompt=system_prompt)
    elif base_url is not None or fleet is not None:
        raise ValueError("give one of base_url, fleet or session_factory")
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


def _sessions(
    base_url: str | None,
    fleet: Any,
    *,
    client_factory: Callable[[str], Any] | None = None,
    system_prompt: str | None = None,
) -> EnvSessionFactory:
    """Sessions on one server (`base_url`) or from a fleet: exactly one of them."""
    if (base_url is None) == (fleet is None):
        raise ValueError("give one of base_url, fleet or session_factory")
    if fleet is not None:
        if client_factory is not None:
            raise ValueError("a fleet makes its own clients: set EnvFleet(client=...)")
        return FleetSessionFactory(fleet, system_prompt=system_prompt)
    assert base_url is not None
    return EnvSessionFactory(base_url, client_factory=client_factory, system_prompt=system_prompt)


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


# -- environment_factory -----------------------------------------------------------------------

_JSON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


class ServedEnvironment:
    """One `GRPOTrainer(environment_factory=...)` instance: a session on a served environment.

    TRL calls `reset(**row)` before each rollout (the returned text is appended to the
    prompt), offers the public methods as tools (one per environment tool: `act` for a
    reset/step environment, the MCP tools otherwise) and scores the rollout with
    `get_reward()`. Subclasses with the tool methods are made by `environment_factory`.

    A tool call the model got wrong reaches the model as a tool error. A failure of the
    environment itself is remembered (TRL would show it to the model too) and `get_reward`
    raises `RolloutInfrastructureError`, so the rollout is never scored 0 for it."""

    def __init__(
        self,
        sessions: EnvSessionFactory,
        *,
        reward_without_step: float = 0.0,
        infra_retries: int = 2,
        observation_text: Callable[[list[Message]], str] | None = None,
    ) -> None:
        self._sessions = sessions
        self._reward_without_step = reward_without_step
        self._infra_retries = infra_retries
        self._observation_text = observation_text
        self._session: Any = None
        self._reward: float | None = None
        self._infra_error: str | None = None
        self.steps = 0

    def reset(self, **row: Any) -> str | None:
        session, self._session = self._session, None
        if session is not None:
            _close_quietly(session)  # a server that went away must not stop the retries below
        self._reward = None
        self._infra_error = None
        self.steps = 0
        error: Exception | None = None
        for _ in range(self._infra_retries + 1):
            try:
                self._session = self._sessions.create(task=dict(row))
                break
            except Exception as exc:  # the server is gone or refused the session
                error = exc
        else:
            assert error is not None
            raise RolloutInfrastructureError({0: f"reset: {type(error).__name__}: {error}"})
        messages = self._session.initial_messages()
        if self._observation_text is not None:
            return self._observation_text(messages)
        return str(messages[-1].get("content") or "")

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._session is None:
            raise RuntimeError("reset() first")
        try:
            result = self._session.call_tool(name, arguments)
        except Exception as exc:
            if not is_model_error(exc):
                self._infra_error = f"{name}: {type(exc).__name__}: {exc}"
            raise
        self.steps += 1
        reward = tool_result_reward(result)
        if reward is not None:
            self._reward = reward
        if result.error is not None and result.data is None:
            return f"error: {result.error}"
        return as_text(result.data)

    def get_reward(self) -> float:
        """The environment's last reward (`reward_without_step` when the model never acted)."""
        if self._infra_error is not None:
            raise RolloutInfrastructureError({0: self._infra_error})
        return self._reward_without_step if self._reward is None else self._reward

    def _close_session(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            session.close()

    # No public `close`: TRL offers every public method to the model as a tool. A session is
    # closed by the next reset, by `close_environments(trainer)`, or when the instance goes.
    def __del__(self) -> None:
        session, self._session = getattr(self, "_session", None), None
        if session is not None:
            # Not here: the collector may be running on the session client's own loop thread,
            # which the blocking close would then wait on forever.
            threading.Thread(target=_close_quietly, args=(session,), daemon=True).start()


def _close_quietly(session: Any) -> None:
    try:
        session.close()
    except Exception:  # the server already dropped it
        pass


def close_environments(trainer: Any) -> None:
    """Close the sessions of a `GRPOTrainer`'s environment instances (TRL keeps them pooled
    for the next batch and never closes them)."""
    pool: dict[Any, list[Any]] = getattr(trainer, "_environment_pool", None) or {}
    for instances in pool.values():
        for instance in instances:
            if isinstance(instance, ServedEnvironment):
                instance._close_session()


def _tool_method(tool: Tool) -> Callable[..., str]:
    """A method with the tool's name, typed parameters and a Google-style docstring: what
    transformers needs to render the tool into the prompt."""
    import inspect

    schema = tool.input_schema or {}
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    names = sorted(properties, key=lambda n: n not in required)

    def method(self: ServedEnvironment, **arguments: Any) -> str:
        return self._call(tool.name, arguments)

    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for name in names:
        annotation = _JSON_TYPES.get(str(properties[name].get("type")), str)
        annotations[name] = annotation
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=annotation,
                default=inspect.Parameter.empty if name in required else None,
            )
        )
    annotations["return"] = str
    method.__name__ = method.__qualname__ = tool.name
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    described = {
        name: (properties[name].get("description") or properties[name].get("title") or name)
        for name in names
    }
    args = "\n".join(f"    {name}: {text.strip()}" for name, text in described.items())
    description = (tool.description or tool.name).strip().replace("\n", " ")
    method.__doc__ = (
        f"{description}\n\nArgs:\n{args}\n\nReturns:\n    What the environment answered."
    )
    if not names:
        method.__doc__ = f"{description}\n\nReturns:\n    What the environment answered."
    return method


def environment_factory(
    base_url: str | None = None,
    *,
    fleet: Any = None,
    client_factory: Callable[[str], Any] | None = None,
    reward_without_step: float = 0.0,
    infra_retries: int = 2,
    observation_text: Callable[[list[Message]], str] | None = None,
) -> Callable[[], ServedEnvironment]:
    """`GRPOTrainer(environment_factory=...)` for a served environment: every call makes a
    `ServedEnvironment` (its own WebSocket session per rollout) whose methods are the
    environment's tools, asked once from the server. With a `fleet` instead of `base_url`,
    every rollout's session comes from the fleet (released at the next reset), and a reset
    after a lost server retries on a live one."""
    sessions = _sessions(base_url, fleet, client_factory=client_factory)
    _, tools = sessions.describe()
    methods = {tool.name: _tool_method(tool) for tool in tools}
    reserved = sorted(methods.keys() & {"reset", "get_reward", "steps"})
    if reserved:
        raise ValueError(f"tool names that clash with the environment's methods: {reserved}")
    cls = type("ServedEnvironmentTools", (ServedEnvironment,), methods)

    def make() -> ServedEnvironment:
        instance: ServedEnvironment = cls(
            sessions,
            reward_without_step=reward_without_step,
            infra_retries=infra_retries,
            observation_text=observation_text,
        )
        return instance

    return make
