"""The trainer-side rollout layer: one call runs a whole episode.

A `ResourceSession` is one episode's environment (its prompt, its tools, its verdict); a
`HarnessAdapter` drives it, either white-box (the trainer samples each model step, so token ids
and logprobs are known) or black-box (an opaque agent runs; evaluation only).
`build_harness_rollout_func` turns both into a TRL `rollout_func`.

Where this differs from OpenEnv 0.10 (the names, signatures and defaults are the same):

- `HarnessRunLimits.max_wall_time_s` bounds an episode's wall time (checked before every model
  step and tool call; a step already running is not interrupted).
- A tool call the model got wrong (unknown tool, invalid arguments) is fed back to the model as
  a tool error instead of aborting the episode; anything else a session raises is an
  infrastructure failure.
- `build_harness_rollout_func(..., max_concurrency=N)` runs the prompts' episodes on N threads,
  results in prompt order.
- An episode that failed for infrastructure reasons is never scored 0: its reward is `None`
  and the result carries `infra_failed` / `rollout_errors` lists so the trainer can drop the
  group (`openenv.core.rubrics.group_relative_advantages` refuses non-finite rewards on
  purpose). TRL accepts `None` from a reward function but sums a sample whose every reward is
  `None` to 0 (with a warning), so `infra_retries` re-runs failed episodes and
  `on_infra_failure="raise"` refuses a batch that still has one.
"""

from __future__ import annotations

import json
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, Literal, Protocol, TypedDict, TypeVar, runtime_checkable

from openenv.core.client_types import StepResult
from openenv.core.env_server.mcp_types import JsonRpcErrorCode, JsonRpcResponse, Tool
from openenv.core.errors import InvalidRequestError, OpenEnvError
from openenv.core.llm_client import LLMResponse

from .training import TrainingTrace

Message = dict[str, Any]
RESERVED_TOOL_NAMES = frozenset({"reset", "step", "state", "close"})


def is_model_error(exc: BaseException) -> bool:
    """True when a tool call failed because of what the model asked (unknown tool, invalid
    arguments, an action the environment refused or a tool that raised on it): the model sees
    the error and may try again. Anything else is the infrastructure's fault."""
    if isinstance(exc, OpenEnvError):
        return exc.category in ("client", "environment")
    return isinstance(exc, (KeyError, ValueError))


@dataclass
class ToolResult:
    """What one tool call returned; `metadata["reward"]` carries an environment reward."""

    data: Any = None
    done: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class VerifyResult:
    """The episode's verdict. `env_reward` forwards a reward the environment produced; the
    orchestration layer never invents one."""

    env_reward: float | None = None
    done: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)


@dataclass
class RolloutEvent:
    type: str
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolTraceEntry:
    tool_name: str
    arguments: dict[str, Any]
    result: ToolResult


@dataclass
class ModelStepResult:
    """One sampled model turn, with the tokens the trainer needs (empty when unknown)."""

    response: LLMResponse
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


@dataclass
class HarnessRolloutResult:
    messages: list[Message] = field(default_factory=list)
    tool_trace: list[ToolTraceEntry] = field(default_factory=list)
    events: list[RolloutEvent] = field(default_factory=list)
    done: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


@dataclass
class HarnessRunLimits:
    """Bounds of one episode. `max_wall_time_s` is ours (None: no bound)."""

    max_turns: int = 10
    max_tool_calls_per_turn: int | None = None
    max_total_tool_calls: int | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    max_wall_time_s: float | None = None


class ModelStep(Protocol):
    def __call__(
        self, messages: list[Message], tools: list[Tool], sampling: dict[str, Any]
    ) -> ModelStepResult: ...


class TraceEntry(TypedDict, total=False):
    """One model call captured by a proxy. `loss_mask` spans prompt and completion tokens;
    `reward` None means unscored."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int]
    request: dict[str, Any]
    response: dict[str, Any]
    metadata: dict[str, Any]
    reward: float | None


@runtime_checkable
class LoopOwningSession(Protocol):
    """A session whose agent owns its loop; its model calls are captured by a proxy."""

    def wait_for_completion(self, timeout_s: float | None = None) -> int: ...

    def fetch_proxy_trace(self) -> list[TraceEntry]: ...


@runtime_checkable
class TrainableSession(Protocol):
    """A loop-owning session that hands back its model calls as a `TrainingTrace`."""

    def wait_for_completion(self, timeout_s: float | None = None) -> int: ...

    def fetch_training_trace(self) -> TrainingTrace: ...


class ResourceSession(ABC):
    """One episode's environment as a harness sees it."""

    @abstractmethod
    def initial_messages(self) -> list[Message]: ...

    @abstractmethod
    def list_tools(self) -> list[Tool]: ...

    @abstractmethod
    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult: ...

    @abstractmethod
    def verify(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        """Called once the harness stopped: forward the environment's reward, add metrics."""

    @abstractmethod
    def close(self) -> None: ...


SessionT = TypeVar("SessionT", bound=ResourceSession)


class ResourceSessionFactory(ABC, Generic[SessionT]):
    @abstractmethod
    def create(
        self, task: Any, seed: int | None = None, episode_id: str | None = None
    ) -> SessionT: ...


class HarnessAdapter(ABC):
    @abstractmethod
    def run_white_box(
        self,
        model_step: ModelStep,
        session: ResourceSession,
        limits: HarnessRunLimits | None = None,
    ) -> HarnessRolloutResult:
        """The trainer samples every model step (token ids and logprobs are known)."""

    @abstractmethod
    def run_black_box(
        self, session: ResourceSession, limits: HarnessRunLimits | None = None
    ) -> HarnessRolloutResult:
        """An opaque agent runs the episode (evaluation: no tokens)."""


# -- helpers ---------------------------------------------------------------------------------


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(jsonable(value), sort_keys=True, default=str)


def jsonable(value: Any) -> Any:
    """Pydantic models and dataclasses as JSON-able data (for messages, metrics, files)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "__dataclass_fields__") and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def tool_result_reward(result: ToolResult) -> float | None:
    """The environment reward a tool result carries, if any."""
    reward = result.metadata.get("reward")
    if reward is None and isinstance(result.data, dict):
        reward = result.data.get("reward")
    return None if reward is None else float(reward)


def resolve_env_reward(rollout: HarnessRolloutResult, verify: VerifyResult) -> float:
    """The episode's reward: the last reward a tool returned, which `verify` must agree with,
    else `verify`'s. Neither: `ValueError` (a reward is never made up here)."""
    from_trace = None
    for entry in reversed(rollout.tool_trace):
        from_trace = tool_result_reward(entry.result)
        if from_trace is not None:
            break
    from_verify = None if verify.env_reward is None else float(verify.env_reward)
    if from_trace is not None and from_verify is not None:
        if not math.isclose(from_trace, from_verify, rel_tol=1e-9, abs_tol=1e-6):
            raise ValueError(
                f"verify.env_reward {from_verify} differs from the environment's reward "
                f"{from_trace}: verify must forward the environment's reward"
            )
    if from_trace is not None:
        return from_trace
    if from_verify is not None:
        return from_verify
    raise ValueError("the rollout produced no environment reward")


def rollout_final_state(rollout: HarnessRolloutResult) -> dict[str, Any]:
    """What `verify` gets as `final_state`: the run, as plain data."""
    return {
        "done": rollout.done,
        "metrics": dict(rollout.metrics),
        "events": [{"type": e.type, "payload": dict(e.payload)} for e in rollout.events],
        "tool_trace": [
            {
                "tool_name": entry.tool_name,
                "arguments": dict(entry.arguments),
                "result": asdict(entry.result),
            }
            for entry in rollout.tool_trace
        ],
    }


# -- a reset/step client as a session --------------------------------------------------------


class StepEnvSessionAdapter(ResourceSession):
    """A reset/step/state client (async clients are used through `.sync()`) as a session.
    Resets in the constructor; closes the client if that fails."""

    def __init__(
        self,
        client: Any,
        *,
        task: Any = None,
        seed: int | None = None,
        episode_id: str | None = None,
        tool_specs: list[Tool],
        action_builder: Callable[[str, dict[str, Any]], Any],
        initial_messages_builder: Callable[[StepResult[Any], Any], list[Message]],
        tool_result_builder: Callable[[str, dict[str, Any], StepResult[Any], Any], ToolResult]
        | None = None,
        verify_builder: Callable[
            [list[Message], Any | None, StepResult[Any] | None, Any], VerifyResult
        ]
        | None = None,
        reset_kwargs: dict[str, Any] | None = None,
    ) -> None:
        sync = getattr(client, "sync", None)
        self._client = sync() if callable(sync) else client
        self._closed = False
        self._task = task
        self._tools = {tool.name: tool for tool in tool_specs}
        reserved = sorted(self._tools.keys() & RESERVED_TOOL_NAMES)
        if reserved:
            self.close()
            raise ValueError(f"tool names reserved for orchestration: {', '.join(reserved)}")
        self._action_builder = action_builder
        self._initial_messages_builder = initial_messages_builder
        self._tool_result_builder = tool_result_builder or _default_tool_result
        self._verify_builder = verify_builder or _default_verify
        kwargs = dict(reset_kwargs or {})
        if seed is not None:
            kwargs.setdefault("seed", seed)
        if episode_id is not None:
            kwargs.setdefault("episode_id", episode_id)
        self._last_result: StepResult[Any] | None = None
        try:
            self._initial_result: StepResult[Any] = self._client.reset(**kwargs)
            self._last_state = self._read_state()
        except BaseException:
            self.close()
            raise

    @property
    def initial_result(self) -> StepResult[Any]:
        return self._initial_result

    def _read_state(self) -> Any:
        state = getattr(self._client, "state", None)
        return state() if callable(state) else None

    def initial_messages(self) -> list[Message]:
        return list(self._initial_messages_builder(self._initial_result, self._task))

    def list_tools(self) -> list[Tool]:
        return list(self._tools.values())

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name in RESERVED_TOOL_NAMES:
            raise KeyError(f"{name!r} is reserved for orchestration, not a tool")
        if name not in self._tools:
            raise KeyError(f"unknown tool {name!r}; the tools are {sorted(self._tools)}")
        result = self._client.step(self._action_builder(name, dict(arguments)))
        self._last_result = result
        self._last_state = self._read_state()
        return self._tool_result_builder(name, dict(arguments), result, self._last_state)

    def verify(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        return self._verify_builder(
            list(transcript), final_state, self._last_result, self._last_state
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        close = getattr(self._client, "close", None)
        if callable(close):
            close()


def _default_tool_result(
    name: str, arguments: dict[str, Any], result: StepResult[Any], state: Any
) -> ToolResult:
    return ToolResult(
        data={
            "tool_name": name,
            "arguments": arguments,
            "observation": jsonable(result.observation),
            "reward": result.reward,
            "done": result.done,
        },
        done=bool(result.done),
        metadata={"reward": result.reward, "state": jsonable(state)},
    )


def _default_verify(
    transcript: list[Message], final_state: Any, last: StepResult[Any] | None, state: Any
) -> VerifyResult:
    plain_state = jsonable(state)
    metrics = {}
    if isinstance(plain_state, dict) and "step_count" in plain_state:
        metrics["step_count"] = plain_state["step_count"]
    return VerifyResult(
        env_reward=None if last is None else last.reward,
        done=bool(last is not None and last.done),
        metrics=metrics,
        artifacts={"final_state": plain_state, "transcript_length": len(transcript)},
    )


# -- a session as MCP JSON-RPC ---------------------------------------------------------------


class SessionMCPBridge:
    """`tools/list` and `tools/call` of a session as JSON-RPC 2.0 (for black-box agents);
    never exposes the reserved orchestration names."""

    def __init__(self, session: ResourceSession) -> None:
        self.session = session

    def handle_request(self, request: dict[str, Any]) -> dict[str, Any]:
        request_id = request.get("id") if isinstance(request, dict) else None

        def error(code: JsonRpcErrorCode, message: str) -> dict[str, Any]:
            return JsonRpcResponse.error_response(
                code, message=message, request_id=request_id
            ).model_dump()

        if not isinstance(request, dict) or request.get("jsonrpc") != "2.0":
            return error(JsonRpcErrorCode.INVALID_REQUEST, "Invalid Request: not JSON-RPC 2.0")
        method = request.get("method")
        params = request.get("params") or {}
        if method == "tools/list":
            tools = [
                {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                for t in self.session.list_tools()
            ]
            return JsonRpcResponse.success({"tools": tools}, request_id=request_id).model_dump()
        if method != "tools/call":
            return error(JsonRpcErrorCode.METHOD_NOT_FOUND, f"Method not found: {method!r}")
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(name, str):
            return error(JsonRpcErrorCode.INVALID_PARAMS, "tools/call needs a tool name")
        if name in RESERVED_TOOL_NAMES:
            return error(JsonRpcErrorCode.INVALID_PARAMS, f"{name!r} is reserved")
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            return error(JsonRpcErrorCode.INVALID_PARAMS, "arguments must be an object")
        try:
            result = self.session.call_tool(name, dict(arguments))
        except KeyError as exc:
            return error(JsonRpcErrorCode.METHOD_NOT_FOUND, str(exc.args[0] if exc.args else exc))
        except (ValueError, InvalidRequestError) as exc:
            return error(JsonRpcErrorCode.INVALID_PARAMS, str(exc))
        except Exception as exc:
            return error(JsonRpcErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        payload = {
            "data": jsonable(result.data),
            "done": result.done,
            "metadata": jsonable(dict(result.metadata)),
            "error": result.error,
        }
        return JsonRpcResponse.success(payload, request_id=request_id).model_dump()


# -- adapters --------------------------------------------------------------------------------


class MCPHarnessAdapter(HarnessAdapter):
    """White-box tool-calling loop: sample, run the tool calls, repeat; stops when the model
    calls no tool, a tool says done, or a limit is reached (`metrics["stop_reason"]`)."""

    def run_white_box(
        self,
        model_step: ModelStep,
        session: ResourceSession,
        limits: HarnessRunLimits | None = None,
    ) -> HarnessRolloutResult:
        limits = limits or HarnessRunLimits()
        deadline = (
            None if limits.max_wall_time_s is None else time.monotonic() + limits.max_wall_time_s
        )
        messages = list(session.initial_messages())
        tools = session.list_tools()
        result = HarnessRolloutResult()
        stop_reason = "max_turns"

        def out_of_time() -> bool:
            return deadline is not None and time.monotonic() >= deadline

        for turn in range(limits.max_turns):
            if out_of_time():
                stop_reason = "max_wall_time"
                break
            step = model_step(messages, tools, dict(limits.sampling))
            response = step.response
            messages.append(response.to_message_dict())
            result.prompt_ids.extend(step.prompt_ids)
            result.completion_ids.extend(step.completion_ids)
            result.logprobs.extend(step.logprobs)
            calls = [
                {"id": c.id, "name": c.name, "arguments": dict(c.args)} for c in response.tool_calls
            ]
            result.events.append(
                RolloutEvent(
                    "model_response",
                    {"turn": turn, "content": response.content, "tool_calls": calls},
                )
            )
            if not response.tool_calls:
                result.done = True
                stop_reason = "no_tool_calls"
                break
            tool_calls = response.tool_calls
            skipped = []
            if limits.max_tool_calls_per_turn is not None:
                skipped = tool_calls[limits.max_tool_calls_per_turn :]
                tool_calls = tool_calls[: limits.max_tool_calls_per_turn]
            for call in tool_calls:
                if (
                    limits.max_total_tool_calls is not None
                    and len(result.tool_trace) >= limits.max_total_tool_calls
                ):
                    stop_reason = "max_total_tool_calls"
                    break
                if out_of_time():
                    stop_reason = "max_wall_time"
                    break
                tool_result = self._call(session, call.name, dict(call.args))
                result.tool_trace.append(ToolTraceEntry(call.name, dict(call.args), tool_result))
                result.events.append(
                    RolloutEvent(
                        "tool_call",
                        {
                            "tool_name": call.name,
                            "arguments": dict(call.args),
                            "done": tool_result.done,
                            "error": tool_result.error,
                        },
                    )
                )
                content = (
                    f"error: {tool_result.error}"
                    if tool_result.error is not None and tool_result.data is None
                    else as_text(tool_result.data)
                )
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}
                )
                if tool_result.done:
                    result.done = True
                    stop_reason = "done"
                    break
            if result.done or stop_reason in ("max_total_tool_calls", "max_wall_time"):
                break
            # Every call of a turn needs an answer, or chat APIs refuse the next request.
            for call in skipped:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "name": call.name,
                        "content": f"error: not run, at most {limits.max_tool_calls_per_turn} "
                        "tool calls per turn",
                    }
                )
        result.messages = messages
        if stop_reason in ("max_turns", "max_total_tool_calls", "max_wall_time"):
            result.metrics["truncated"] = True
        result.metrics["stop_reason"] = stop_reason
        result.metrics.setdefault(
            "turns", sum(1 for e in result.events if e.type == "model_response")
        )
        result.metrics.setdefault("tool_calls", len(result.tool_trace))
        return result

    @staticmethod
    def _call(session: ResourceSession, name: str, arguments: dict[str, Any]) -> ToolResult:
        try:
            return session.call_tool(name, arguments)
        except Exception as exc:
            if not is_model_error(exc):
                raise
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            return ToolResult(error=str(message), metadata={"error_type": type(exc).__name__})

    def run_black_box(
        self, session: ResourceSession, limits: HarnessRunLimits | None = None
    ) -> HarnessRolloutResult:
        raise NotImplementedError(
            "MCPHarnessAdapter is white-box only; use CLIHarnessAdapter for an opaque agent"
        )


class CLIHarnessAdapter(HarnessAdapter):
    """Black-box only: `runner(bridge, session, limits)` runs an opaque agent against the
    session's tools (through `bridge`, a `SessionMCPBridge`) and returns the rollout."""

    def __init__(
        self,
        runner: Callable[
            [SessionMCPBridge, ResourceSession, HarnessRunLimits], HarnessRolloutResult
        ],
    ) -> None:
        self._runner = runner

    def run_white_box(
        self,
        model_step: ModelStep,
        session: ResourceSession,
        limits: HarnessRunLimits | None = None,
    ) -> HarnessRolloutResult:
        raise NotImplementedError("CLIHarnessAdapter runs black-box (evaluation) rollouts only")

    def run_black_box(
        self, session: ResourceSession, limits: HarnessRunLimits | None = None
    ) -> HarnessRolloutResult:
        return self._runner(SessionMCPBridge(session), session, limits or HarnessRunLimits())


# -- TRL ---------------------------------------------------------------------------------------


@dataclass
class _Episode:
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    infra_failed: bool = False
    error: str | None = None


class RolloutInfrastructureError(OpenEnvError):
    """Episodes of a batch failed for infrastructure reasons (after the retries): the batch
    has no valid rewards for them, so it is refused rather than trained on."""

    category = "infrastructure"

    def __init__(self, errors: dict[int, str]) -> None:
        self.errors = dict(errors)
        listed = "; ".join(f"prompt {i}: {e}" for i, e in sorted(self.errors.items()))
        super().__init__(f"{len(self.errors)} episode(s) failed: {listed}")


def build_harness_rollout_func(
    *,
    session_factory: Any,
    harness_adapter: HarnessAdapter,
    model_step_builder: Callable[[Any, ResourceSession], ModelStep] | None = None,
    limits: HarnessRunLimits | None = None,
    reward_key: str = "env_reward",
    max_concurrency: int = 1,
    infra_retries: int = 0,
    on_infra_failure: Literal["report", "raise"] = "report",
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """A TRL `rollout_func(prompts, trainer)`: one episode per prompt, white-box (the trainer's
    model through `model_step_builder`) or, with no `model_step_builder`, black-box (the
    harness's own agent, e.g. `blackbox.AgentHarnessAdapter`).

    Returns `prompt_ids`, `completion_ids`, `logprobs`, `<reward_key>`, `verify_metrics` (as
    OpenEnv) plus `infra_failed` (bool per prompt) and `rollout_errors` (message or None).
    A failed episode's reward is `None`, never 0: an infrastructure failure (the session could
    not be created, the model or environment broke) sets `infra_failed`; an episode that ran but
    produced no environment reward has `infra_failed=False` and an error. `max_concurrency`
    episodes run at once on threads; results stay in prompt order. An infrastructure failure is
    run again up to `infra_retries` times; `on_infra_failure="raise"` then raises
    `RolloutInfrastructureError` instead of returning the batch (for trainers, like TRL, that
    would turn a missing reward into 0).
    """
    if max_concurrency < 1:
        raise ValueError("max_concurrency must be >= 1")
    if infra_retries < 0:
        raise ValueError("infra_retries must be >= 0")
    if on_infra_failure not in ("report", "raise"):
        raise ValueError("on_infra_failure must be 'report' or 'raise'")

    def run_one(prompt: Any, trainer: Any) -> _Episode:
        try:
            session = session_factory.create(task=prompt)
        except Exception as exc:
            return _Episode(infra_failed=True, error=f"session: {type(exc).__name__}: {exc}")
        episode = _Episode()
        try:
            try:
                if model_step_builder is None:
                    rollout = harness_adapter.run_black_box(session=session, limits=limits)
                else:
                    rollout = harness_adapter.run_white_box(
                        model_step=model_step_builder(trainer, session),
                        session=session,
                        limits=limits,
                    )
                verify = session.verify(
                    transcript=rollout.messages, final_state=rollout_final_state(rollout)
                )
            except Exception as exc:
                episode.infra_failed = True
                episode.error = f"{type(exc).__name__}: {exc}"
                return episode
            episode.prompt_ids = list(rollout.prompt_ids)
            episode.completion_ids = list(rollout.completion_ids)
            episode.logprobs = list(rollout.logprobs)
            episode.metrics = dict(verify.metrics)
            try:
                episode.reward = resolve_env_reward(rollout, verify)
            except ValueError as exc:
                episode.error = str(exc)
            return episode
        finally:
            try:
                session.close()
            except Exception as exc:  # a leak to report, not a reason to lose the episode
                episode.metrics.setdefault("close_error", f"{type(exc).__name__}: {exc}")

    def run_all(prompts: list[Any], trainer: Any) -> list[_Episode]:
        if max_concurrency == 1 or len(prompts) <= 1:
            return [run_one(prompt, trainer) for prompt in prompts]
        with ThreadPoolExecutor(
            max_workers=min(max_concurrency, len(prompts)), thread_name_prefix="rollout"
        ) as pool:
            return list(pool.map(lambda p: run_one(p, trainer), prompts))

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        episodes = run_all(list(prompts), trainer)
        for _ in range(infra_retries):
            failed = [i for i, e in enumerate(episodes) if e.infra_failed]
            if not failed:
                break
            for index, episode in zip(
                failed, run_all([prompts[i] for i in failed], trainer), strict=True
            ):
                episodes[index] = episode
        failures = {i: e.error or "failed" for i, e in enumerate(episodes) if e.infra_failed}
        if failures and on_infra_failure == "raise":
            raise RolloutInfrastructureError(failures)
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": [e.logprobs for e in episodes],
            reward_key: [e.reward for e in episodes],
            "verify_metrics": [e.metrics for e in episodes],
            "infra_failed": [e.infra_failed for e in episodes],
            "rollout_errors": [e.error for e in episodes],
        }

    return rollout_func


__all__ = [
    "RESERVED_TOOL_NAMES",
    "CLIHarnessAdapter",
    "HarnessAdapter",
    "HarnessRolloutResult",
    "HarnessRunLimits",
    "LoopOwningSession",
    "MCPHarnessAdapter",
    "Message",
    "ModelStep",
    "ModelStepResult",
    "ResourceSession",
    "ResourceSessionFactory",
    "RolloutEvent",
    "RolloutInfrastructureError",
    "SessionMCPBridge",
    "StepEnvSessionAdapter",
    "ToolResult",
    "ToolTraceEntry",
    "TraceEntry",
    "TrainableSession",
    "VerifyResult",
    "build_harness_rollout_func",
]
