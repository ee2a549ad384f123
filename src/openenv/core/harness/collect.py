"""Collecting rollouts into a dataset (`openenv collect`).

`CollectRunner` runs episodes (several at once with `concurrency`) and appends each one to
`results.jsonl` the moment it ends, so a crash loses nothing and `resume` continues where a run
stopped. Unlike OpenEnv 0.10, no episode disappears without a trace: every line has a `status`:

- `collected`: kept; part of the dataset.
- `dropped`: ran fine but `should_keep` refused it (e.g. a loss); kept in the file, not the
  dataset, and not run again on resume.
- `failed`: the session, the model or the environment broke; `error` says how, `reward` is null
  (never 0). A resumed run tries it again.

A record keeps OpenEnv's `reward` (the last reward the environment gave, which `verify` must
agree with) and, ours, `step_rewards` (one per tool call, in order: None for a call the
environment gave no reward, e.g. one it refused), `episode_return` (their sum) and
`model_calls` (one per model call, in order: its prompt and completion token ids and the
completion's logprobs when the endpoint returned them, None otherwise, with what it answered).
An episode scored 1.0, 0.2, 1.0 has `reward` 1.0, `step_rewards` [1.0, 0.2, 1.0] and
`episode_return` 2.2.

`write_dataset` writes the collected lines to `train.jsonl` (plain JSON lines, always) and, with
the `collect` extra, as a Hugging Face `datasets` dataset (`save_to_disk`, in
`<output_dir>/dataset`); `push_to_hf_hub` uploads `train.jsonl` with a dataset card.
"""

from __future__ import annotations

import json
import math
import threading
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from openenv.core.env_server.mcp_types import Tool
from openenv.core.llm_client import AnthropicClient, LLMClient, LLMStatusError, OpenAIClient
from openenv.core.utils import run_coroutine_sync

from .rollout import (
    HarnessAdapter,
    HarnessRolloutResult,
    HarnessRunLimits,
    Message,
    ModelStep,
    ModelStepResult,
    ResourceSessionFactory,
    VerifyResult,
    jsonable,
    resolve_env_reward,
    rollout_final_state,
    tool_result_reward,
)

RESULTS_FILENAME = "results.jsonl"
METADATA_FILENAME = "metadata.json"
README_FILENAME = "README.md"
TRAIN_FILENAME = "train.jsonl"
DATASET_DIRNAME = "dataset"

STATUS_COLLECTED = "collected"
STATUS_DROPPED = "dropped"
STATUS_FAILED = "failed"

_SAMPLING_KEYS = frozenset({"temperature", "max_tokens", "top_p"})
TOOL_CHOICES = ("auto", "required", "none")
#: What the request asks an OpenAI-compatible server for, to record every call's tokens (vLLM's
#: `return_token_ids`); a server that refuses a key is asked again without it.
_TOKEN_REQUEST = {"logprobs": True, "return_token_ids": True}


@dataclass
class EpisodeRecord:
    """One line of `results.jsonl`. `reward` is None when the episode failed or the
    environment gave no reward; `status` and `error` are ours (see the module doc)."""

    episode_id: str
    messages: list[dict[str, Any]]
    reward: float | None
    done: bool
    tool_trace: list[dict[str, Any]]
    metrics: dict[str, Any]
    verify_metrics: dict[str, Any]
    artifacts: dict[str, Any]
    task: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    status: str = STATUS_COLLECTED
    error: str | None = None
    #: Ours: each tool call's reward (None: none given), their sum (see the module doc), and
    #: each model call (`model_call_record`).
    step_rewards: list[float | None] = field(default_factory=list)
    episode_return: float | None = None
    model_calls: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_rollout(
        cls,
        episode_id: str,
        rollout: HarnessRolloutResult,
        verify: VerifyResult,
        task: Any = None,
        extra: dict[str, Any] | None = None,
        model_calls: list[dict[str, Any]] | None = None,
    ) -> EpisodeRecord:
        """A record of a finished episode. A reward from `verify` that contradicts the
        environment's raises `ValueError`; no reward at all gives `reward=None`. `model_calls`
        (`model_call_record`s) default to the rollout's `metrics["model_calls"]` (a black-box
        agent's, as the recording proxy saw them)."""
        try:
            reward: float | None = resolve_env_reward(rollout, verify)
        except ValueError as exc:
            if "no environment reward" not in str(exc):
                raise
            reward = None
        final = rollout_final_state(rollout)
        metrics = dict(rollout.metrics)
        captured = metrics.pop("model_calls", None)  # kept once, in `model_calls`
        if model_calls is None:
            found = [call for call in captured or [] if isinstance(call, dict)]
            model_calls = [_captured_call(call, index) for index, call in enumerate(found)]
        step_rewards = [tool_result_reward(entry.result) for entry in rollout.tool_trace]
        given = [r for r in step_rewards if r is not None]
        # The sum of what the steps gave; an environment that rewards only through `verify`
        # (no step carries a reward) returns that reward.
        episode_return = math.fsum(given) if given else reward
        return cls(
            episode_id=episode_id,
            messages=[dict(m) for m in rollout.messages],
            reward=reward,
            done=bool(rollout.done or verify.done),
            tool_trace=final["tool_trace"],
            metrics=metrics,
            verify_metrics=dict(verify.metrics),
            artifacts=dict(verify.artifacts),
            task=task,
            extra=dict(extra or {}),
            step_rewards=step_rewards,
            episode_return=episode_return,
            model_calls=list(model_calls),
        )

    @classmethod
    def failure(
        cls,
        episode_id: str,
        error: str,
        task: Any = None,
        model_calls: list[dict[str, Any]] | None = None,
    ) -> EpisodeRecord:
        """A failed episode: no reward, no return (never 0); the model calls made before the
        failure are kept."""
        return cls(
            episode_id=episode_id,
            messages=[],
            reward=None,
            done=False,
            tool_trace=[],
            metrics={},
            verify_metrics={},
            artifacts={},
            task=task,
            status=STATUS_FAILED,
            error=error,
            model_calls=list(model_calls or []),
        )

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(json.dumps(jsonable(asdict(self)), default=str))
        return data


def model_call_record(step: ModelStepResult, index: int) -> dict[str, Any]:
    """One model call of an episode as `EpisodeRecord.model_calls` keeps it: token ids and
    logprobs (None when the endpoint gave none), and what the model answered."""
    response = step.response
    finish = None
    raw = response.raw if isinstance(response.raw, dict) else {}
    choices = raw.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        finish = choices[0].get("finish_reason")
    elif raw.get("stop_reason") is not None:  # Anthropic
        finish = raw.get("stop_reason")
    return {
        "index": index,
        "prompt_ids": list(step.prompt_ids) or None,
        "completion_ids": list(step.completion_ids) or None,
        "logprobs": list(step.logprobs) or None,
        "content": response.content or "",
        "tool_calls": [
            {"id": call.id, "name": call.name, "arguments": dict(call.args)}
            for call in response.tool_calls
        ],
        "finish_reason": None if finish is None else str(finish),
    }


def _captured_call(call: dict[str, Any], index: int) -> dict[str, Any]:
    """A call the recording proxy saw (`capture.ModelCall.to_dict()`), as a `model_calls`
    entry."""
    calls = []
    for entry in call.get("tool_calls") or []:
        if isinstance(entry, dict):
            calls.append(
                {
                    "id": str(entry.get("id") or ""),
                    "name": str(entry.get("name") or ""),
                    "arguments": entry.get("arguments") or {},
                }
            )
    return {
        "index": index,
        "prompt_ids": call.get("prompt_token_ids"),
        "completion_ids": call.get("completion_token_ids"),
        "logprobs": call.get("logprobs"),
        "content": str(call.get("response_text") or ""),
        "tool_calls": calls,
        "finish_reason": call.get("stop_reason"),
    }


class RolloutSerializer:
    """`results.jsonl` (append-only, one line per episode, safe from several threads) and
    `metadata.json` in `output_dir`."""

    def __init__(self, output_dir: Path | str) -> None:
        self._output_dir = Path(output_dir)
        self._lock = threading.Lock()

    @property
    def output_dir(self) -> Path:
        return self._output_dir

    @property
    def results_path(self) -> Path:
        return self._output_dir / RESULTS_FILENAME

    @property
    def metadata_path(self) -> Path:
        return self._output_dir / METADATA_FILENAME

    def write_episode(self, record: EpisodeRecord) -> None:
        line = json.dumps(record.to_dict(), default=str)
        with self._lock:
            self._output_dir.mkdir(parents=True, exist_ok=True)
            with self.results_path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
                handle.flush()

    def write_metadata(self, metadata: dict[str, Any]) -> None:
        self._output_dir.mkdir(parents=True, exist_ok=True)
        self.metadata_path.write_text(json.dumps(metadata, indent=2, default=str) + "\n")

    def read_records(self) -> list[dict[str, Any]]:
        """Every complete line; a torn last line (a crash mid-write) is skipped."""
        if not self.results_path.exists():
            return []
        records = []
        for raw in self.results_path.read_text(encoding="utf-8").splitlines():
            try:
                payload = json.loads(raw)
            except ValueError:
                continue
            if isinstance(payload, dict) and isinstance(payload.get("episode_id"), str):
                records.append(payload)
        return records

    def collected_episode_ids(self) -> set[str]:
        """Episodes a resumed run skips: collected or dropped ones (failed ones run again)."""
        return {
            r["episode_id"]
            for r in self.read_records()
            if r.get("status", STATUS_COLLECTED) != STATUS_FAILED
        }

    def kept_records(self) -> list[dict[str, Any]]:
        """The dataset's rows: collected episodes, the last line of each id, in id order
        (concurrent episodes end in any order)."""
        latest: dict[str, dict[str, Any]] = {}
        for record in self.read_records():
            latest[record["episode_id"]] = record
        return [
            latest[key]
            for key in sorted(latest)
            if latest[key].get("status", STATUS_COLLECTED) == STATUS_COLLECTED
        ]


@dataclass
class CollectResult:
    num_collected: int
    num_skipped: int
    num_dropped: int
    num_failed: int
    episode_ids: list[str]
    avg_reward: float
    success_rate: float
    #: Ours: rewards of the collected episodes (None: the environment gave none), and the
    #: failures as {episode_id: error}.
    rewards: list[float | None] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    #: Rewards of the episodes the filter dropped (played to the end, not kept).
    dropped_rewards: list[float | None] = field(default_factory=list)
    #: Returns (sums of the step rewards) of the collected episodes, in the order of `rewards`.
    returns: list[float | None] = field(default_factory=list)

    def reward_summary(self) -> dict[str, Any]:
        scored = [r for r in self.rewards if r is not None]
        returned = [r for r in self.returns if r is not None]
        return {
            "count": len(self.rewards),
            "scored": len(scored),
            "mean": sum(scored) / len(scored) if scored else None,
            "min": min(scored) if scored else None,
            "max": max(scored) if scored else None,
            "mean_return": sum(returned) / len(returned) if returned else None,
            "success_rate": self.success_rate if scored else None,
            "failed": self.num_failed,
            "dropped": self.num_dropped,
            "skipped": self.num_skipped,
        }


ProgressCallback = Callable[[EpisodeRecord | None], None]


class CollectRunner:
    """Runs episodes into a `RolloutSerializer`. Tasks are assigned by episode position, so a
    resumed run gives each episode the same task as the first run did."""

    def __init__(
        self,
        *,
        session_factory: ResourceSessionFactory[Any],
        harness_adapter: HarnessAdapter,
        serializer: RolloutSerializer,
        tasks: Iterable[Any] | None = None,
        limits: HarnessRunLimits | None = None,
        concurrency: int = 1,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self._session_factory = session_factory
        self._harness_adapter = harness_adapter
        self._serializer = serializer
        # Read lazily (a task stream may be endless), and kept so resumed ids keep their task.
        self._task_source = iter(tasks) if tasks is not None else None
        self._tasks: list[Any] = []
        self._limits = limits
        self._concurrency = concurrency

    def _read_tasks(self, count: int) -> None:
        while self._task_source is not None and len(self._tasks) < count:
            try:
                self._tasks.append(next(self._task_source))
            except StopIteration:
                self._task_source = None

    def _task(self, index: int) -> Any:
        return self._tasks[index] if index < len(self._tasks) else None

    def run_episode(
        self, model_step: ModelStep, episode_id: str, task: Any, seed: int | None = None
    ) -> EpisodeRecord:
        """One episode as a record; a failure becomes a `failed` record, never an exception.
        Every model call is recorded (`model_call_record`), tokens and logprobs included."""
        try:
            session = self._session_factory.create(task=task, seed=seed, episode_id=episode_id)
        except Exception as exc:
            return EpisodeRecord.failure(episode_id, f"session: {type(exc).__name__}: {exc}", task)
        calls: list[dict[str, Any]] = []

        def recorded_step(
            messages: list[Message], tools: list[Tool], sampling: dict[str, Any]
        ) -> ModelStepResult:
            step = model_step(messages, tools, sampling)
            calls.append(model_call_record(step, len(calls)))
            return step

        try:
            rollout = self._harness_adapter.run_white_box(
                model_step=recorded_step, session=session, limits=self._limits
            )
            verify = session.verify(
                transcript=rollout.messages, final_state=rollout_final_state(rollout)
            )
            return EpisodeRecord.from_rollout(
                episode_id, rollout, verify, task=task, model_calls=calls or None
            )
        except Exception as exc:
            return EpisodeRecord.failure(
                episode_id, f"{type(exc).__name__}: {exc}", task, model_calls=calls
            )
        finally:
            try:
                session.close()
            except Exception as exc:  # reported, but the episode is kept
                warnings.warn(
                    f"closing {episode_id}'s session: {exc}", RuntimeWarning, stacklevel=2
                )

    def run(
        self,
        *,
        model_step: ModelStep,
        num_episodes: int,
        episode_id_prefix: str = "ep",
        resume: bool = True,
        should_keep: Callable[[EpisodeRecord], bool] | None = None,
        progress: ProgressCallback | None = None,
        seed: int | None = None,
    ) -> CollectResult:
        """Collect `num_episodes` episodes named `<prefix>-000000`, ... `progress` is called
        after each episode (None for a skipped one). With `seed`, episode i resets with
        `seed + i`."""
        planned = [f"{episode_id_prefix}-{i:06d}" for i in range(num_episodes)]
        self._read_tasks(num_episodes)
        if resume:
            done_ids = self._serializer.collected_episode_ids()
        else:
            self._move_old_results()
            done_ids = set()
        result = CollectResult(0, 0, 0, 0, planned, 0.0, 0.0)
        lock = threading.Lock()

        def one(index: int) -> None:
            episode_id = planned[index]
            if episode_id in done_ids:
                with lock:
                    result.num_skipped += 1
                if progress:
                    progress(None)
                return
            record = self.run_episode(
                model_step, episode_id, self._task(index), None if seed is None else seed + index
            )
            if record.status != STATUS_FAILED and should_keep is not None:
                try:
                    keep = should_keep(record)
                except Exception as exc:
                    record.status, record.error = STATUS_FAILED, f"should_keep: {exc}"
                else:
                    if not keep:
                        record.status = STATUS_DROPPED
            self._serializer.write_episode(record)
            with lock:
                if record.status == STATUS_FAILED:
                    result.num_failed += 1
                    result.failures[episode_id] = record.error or "failed"
                elif record.status == STATUS_DROPPED:
                    result.num_dropped += 1
                    result.dropped_rewards.append(record.reward)
                else:
                    result.num_collected += 1
                    result.rewards.append(record.reward)
                    result.returns.append(record.episode_return)
            if progress:
                progress(record)

        if self._concurrency == 1:
            for index in range(len(planned)):
                one(index)
        else:
            with ThreadPoolExecutor(self._concurrency, thread_name_prefix="collect") as pool:
                list(pool.map(one, range(len(planned))))
        scored = [r for r in result.rewards if r is not None and math.isfinite(r)]
        result.avg_reward = sum(scored) / len(scored) if scored else 0.0
        result.success_rate = sum(1 for r in scored if r > 0) / len(scored) if scored else 0.0
        return result

    def _move_old_results(self) -> None:
        """`resume=False` starts a fresh file; the old one is kept beside it, never deleted."""
        path = self._serializer.results_path
        if not path.exists():
            return
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        backup = path.with_name(f"{path.stem}.{stamp}.bak{path.suffix}")
        path.replace(backup)
        warnings.warn(
            f"resume=False: moved the old results to {backup}", RuntimeWarning, stacklevel=3
        )


# -- model steps --------------------------------------------------------------------------


def _mcp_tool(tool: Tool) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema}


def _tool_choice(llm_client: LLMClient, tool_choice: str) -> Any:
    """`tool_choice` in the client's dialect: auto, required, none, or a tool's name."""
    if not tool_choice:
        raise ValueError(f"tool_choice must be one of {', '.join(TOOL_CHOICES)} or a tool name")
    anthropic = isinstance(llm_client, AnthropicClient)
    if tool_choice in TOOL_CHOICES:
        if anthropic:  # the Messages API's spelling
            return {"type": "any" if tool_choice == "required" else tool_choice}
        return tool_choice
    if anthropic:
        return {"type": "tool", "name": tool_choice}
    return {"type": "function", "function": {"name": tool_choice}}


def build_model_step(
    llm_client: LLMClient,
    *,
    system_prompt: str | None = None,
    tool_choice: str | None = None,
    request_tokens: bool | None = None,
) -> ModelStep:
    """A `ModelStep` on any `LLMClient` (OpenAI-compatible or Anthropic). Sampling keys the
    clients do not take (other than temperature, max_tokens, top_p) are dropped with a
    warning.

    Ours: `tool_choice` ("auto", "required": the model must call a tool, "none", or a tool's
    name: the model must call that one; None sends none, the server's default) goes with every
    request that offers tools. `request_tokens`
    (default: on for an `OpenAIClient`) asks for the prompt and completion token ids (vLLM's
    `return_token_ids`, which `openenv model serve` answers too) and the completion's logprobs,
    and puts them in the `ModelStepResult`; a server that refuses one of those keys (HTTP 400
    naming it) is asked again without it, for the rest of the run."""
    if request_tokens is None:
        request_tokens = isinstance(llm_client, OpenAIClient)
    choice = None if tool_choice is None else _tool_choice(llm_client, tool_choice)
    extra: dict[str, Any] = dict(_TOKEN_REQUEST) if request_tokens else {}

    def complete(conversation: list[Message], specs: list[dict[str, Any]], **kwargs: Any) -> Any:
        while True:
            sent = dict(extra)  # episodes run on several threads
            try:
                return run_coroutine_sync(
                    llm_client.complete_with_tools(
                        messages=conversation, tools=specs, **kwargs, **sent
                    )
                )
            except LLMStatusError as exc:
                refused = [k for k in sent if exc.status_code == 400 and k in exc.body]
                if not refused:
                    raise
                for key in refused:  # e.g. a hosted API without vLLM's return_token_ids
                    extra.pop(key, None)

    def model_step(
        messages: list[dict[str, Any]], tools: list[Tool], sampling: dict[str, Any]
    ) -> ModelStepResult:
        conversation = list(messages)
        if system_prompt and not any(m.get("role") == "system" for m in conversation):
            conversation.insert(0, {"role": "system", "content": system_prompt})
        unknown = sorted(set(sampling) - _SAMPLING_KEYS)
        if unknown:
            warnings.warn(
                f"sampling keys ignored: {', '.join(unknown)}", RuntimeWarning, stacklevel=2
            )
        kwargs = {k: v for k, v in sampling.items() if k in _SAMPLING_KEYS}
        if tools and choice is not None:
            kwargs["tool_choice"] = choice
        response = complete(conversation, [_mcp_tool(t) for t in tools], **kwargs)
        return ModelStepResult(response=response, **_tokens_of(response.raw))

    return model_step


def _tokens_of(raw: Any) -> dict[str, list[Any]]:
    """The token ids and logprobs in an OpenAI-compatible reply (empty when it has none)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("choices"), list):
        return {}
    from .capture.dialects import parse_openai_response

    try:
        completion = parse_openai_response(raw)
    except (ValueError, TypeError, AttributeError):
        return {}
    return {
        "prompt_ids": list(completion.prompt_token_ids or []),
        "completion_ids": list(completion.token_ids or []),
        "logprobs": list(completion.logprobs or []),
    }


# -- datasets and the Hub -----------------------------------------------------------------


def _json_columns(record: dict[str, Any]) -> dict[str, Any]:
    """A row whose free-form parts are JSON text: Arrow needs one type per column, and
    tool results, metrics and tasks differ from episode to episode."""
    row = {
        "episode_id": record["episode_id"],
        "messages": [_message_row(m) for m in record.get("messages") or []],
        "reward": record.get("reward"),
        "done": bool(record.get("done")),
        "step_rewards": [_number(r) for r in record.get("step_rewards") or []],
        "episode_return": _number(record.get("episode_return")),
        "model_calls": [_model_call_row(c) for c in record.get("model_calls") or []],
    }
    for key in ("tool_trace", "metrics", "verify_metrics", "artifacts", "task", "extra"):
        row[key] = json.dumps(record.get(key), sort_keys=True, default=str)
    return row


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _tool_call_row(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call in OpenAI's shape (`function.arguments` as JSON text); also takes the flat
    `{"id", "name", "arguments"}` of `model_calls`."""
    function = call.get("function") or {
        "name": call.get("name"),
        "arguments": call.get("arguments"),
    }
    arguments = function.get("arguments")
    return {
        "id": str(call.get("id") or ""),
        "type": str(call.get("type") or "function"),
        "function": {
            "name": str(function.get("name") or ""),
            "arguments": arguments if isinstance(arguments, str) else _text(arguments),
        },
    }


def _message_row(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message in OpenAI's shape with fixed types (arguments as JSON text)."""
    return {
        "role": str(message.get("role", "")),
        "content": _text(message.get("content")),
        "tool_calls": [_tool_call_row(c) for c in message.get("tool_calls") or []],
        "tool_call_id": message.get("tool_call_id"),
        "name": message.get("name"),
    }


def _ids(value: Any) -> list[int] | None:
    return None if value is None else [int(v) for v in value]


def _model_call_row(call: dict[str, Any]) -> dict[str, Any]:
    logprobs = call.get("logprobs")
    return {
        "index": int(call.get("index") or 0),
        "prompt_ids": _ids(call.get("prompt_ids")),
        "completion_ids": _ids(call.get("completion_ids")),
        "logprobs": None if logprobs is None else [float(v) for v in logprobs],
        "content": _text(call.get("content")),
        "tool_calls": [_tool_call_row(c) for c in call.get("tool_calls") or []],
        "finish_reason": call.get("finish_reason"),
    }


def _text(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content, default=str)


def write_train_jsonl(output_dir: Path | str) -> Path:
    """Write the collected episodes to `<output_dir>/train.jsonl`, one JSON object a line
    (`load_dataset("json", data_files=...)` reads it); needs no `datasets`. Returns its path."""
    output_dir = Path(output_dir)
    train = output_dir / TRAIN_FILENAME
    kept = RolloutSerializer(output_dir).kept_records()
    with train.open("w", encoding="utf-8") as handle:
        for record in kept:
            handle.write(json.dumps(record, default=str) + "\n")
    return train


def write_dataset(output_dir: Path | str) -> Path:
    """Save the collected episodes as `train.jsonl` (always, see `write_train_jsonl`) and as a
    `datasets.Dataset` in `<output_dir>/dataset` (load it with `datasets.load_from_disk`;
    without the `datasets` package, ImportError after train.jsonl is written). `messages` are
    OpenAI-style chat messages (role, content, tool_calls with JSON-text arguments,
    tool_call_id, name); `step_rewards`, `episode_return` and `model_calls` (index, prompt_ids,
    completion_ids, logprobs, content, tool_calls as in messages, finish_reason) are typed
    columns; the other free-form fields are JSON text."""
    output_dir = Path(output_dir)
    train = write_train_jsonl(output_dir)
    try:
        import datasets
    except ImportError as exc:
        raise ImportError(
            f"{train} is written; the `datasets` dataset ({DATASET_DIRNAME}/) needs the "
            "`datasets` package: pip install 'openenv[collect]'"
        ) from exc
    kept = RolloutSerializer(output_dir).kept_records()
    tool_call = {
        "id": datasets.Value("string"),
        "type": datasets.Value("string"),
        "function": {
            "name": datasets.Value("string"),
            "arguments": datasets.Value("string"),
        },
    }
    features = datasets.Features(
        {
            "episode_id": datasets.Value("string"),
            "messages": [
                {
                    "role": datasets.Value("string"),
                    "content": datasets.Value("string"),
                    "tool_calls": [tool_call],
                    "tool_call_id": datasets.Value("string"),
                    "name": datasets.Value("string"),
                }
            ],
            "reward": datasets.Value("float64"),
            "done": datasets.Value("bool"),
            "step_rewards": [datasets.Value("float64")],
            "episode_return": datasets.Value("float64"),
            "model_calls": [
                {
                    "index": datasets.Value("int64"),
                    "prompt_ids": [datasets.Value("int64")],
                    "completion_ids": [datasets.Value("int64")],
                    "logprobs": [datasets.Value("float64")],
                    "content": datasets.Value("string"),
                    "tool_calls": [tool_call],
                    "finish_reason": datasets.Value("string"),
                }
            ],
            **{
                key: datasets.Value("string")
                for key in ("tool_trace", "metrics", "verify_metrics", "artifacts", "task", "extra")
            },
        }
    )
    rows = [_json_columns(r) for r in kept]
    columns = {name: [row[name] for row in rows] for name in features}
    dataset = datasets.Dataset.from_dict(columns, features=features)
    target = output_dir / DATASET_DIRNAME
    quiet = datasets.utils.logging.is_progress_bar_enabled()  # a bar per save is noise here
    if quiet:
        datasets.disable_progress_bars()
    try:
        dataset.save_to_disk(str(target))
    finally:
        if quiet:
            datasets.enable_progress_bars()
    return target


def build_dataset_readme(output_dir: Path | str, *, config_name: str = "default") -> str:
    """A dataset card whose front matter makes `train.jsonl` the only data file."""
    output_dir = Path(output_dir)
    serializer = RolloutSerializer(output_dir)
    metadata: dict[str, Any] = {}
    if serializer.metadata_path.exists():
        try:
            metadata = json.loads(serializer.metadata_path.read_text())
        except ValueError:
            metadata = {}
    kept = serializer.kept_records()
    lines = [
        "---",
        "configs:",
        f"- config_name: {config_name}",
        "  data_files:",
        "  - split: train",
        f'    path: "{TRAIN_FILENAME}"',
        "---",
        "",
        "# Rollouts collected with `openenv collect`",
        "",
        f"- Episodes: {len(kept)}",
    ]
    for key, value in metadata.items():
        lines.append(f"- {key}: `{value}`")
    lines += [
        "",
        "Each row: `episode_id`, `messages` (chat transcript), `reward` (the last reward the",
        "environment gave; null when it gave none), `step_rewards` (each tool call's reward),",
        "`episode_return` (their sum), `model_calls` (each model call's `prompt_ids`,",
        "`completion_ids` and `logprobs`, null when the endpoint gave none, and its answer),",
        "`done`, `tool_trace`, `metrics`, `verify_metrics`, `artifacts`, `task`, `extra`.",
        "`results.jsonl` also lists dropped and failed episodes (`status`, `error`).",
        "",
    ]
    if metadata.get("smoke_test"):
        lines += [
            "**Smoke test:** these episodes were played by a scripted policy, not a model;",
            "they check the pipeline and are not training data.",
            "",
        ]
    return "\n".join(lines)


@dataclass
class PushPlan:
    """What `push_to_hf_hub` uploads (all of it with `dry_run=True`, nothing is sent)."""

    repo_id: str
    url: str
    files: list[str]
    private: bool
    commit_message: str
    num_episodes: int


def push_to_hf_hub(
    output_dir: Path | str,
    repo_id: str,
    *,
    private: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    dry_run: bool = False,
    config_name: str = "default",
) -> str | PushPlan:
    """Upload a collect run as a Hub dataset (`train.jsonl` + card, with `results.jsonl` and
    `metadata.json`) and return its URL; `dry_run=True` prepares the files and returns the
    `PushPlan` instead, without any network access."""
    output_dir = Path(output_dir)
    results = output_dir / RESULTS_FILENAME
    if not results.exists():
        raise FileNotFoundError(f"no {RESULTS_FILENAME} in {output_dir}: run a collect job first")
    if "/" not in repo_id:
        raise ValueError(f"repo id {repo_id!r} must be 'user/name'")
    serializer = RolloutSerializer(output_dir)
    kept = serializer.kept_records()
    write_train_jsonl(output_dir)
    (output_dir / README_FILENAME).write_text(
        build_dataset_readme(output_dir, config_name=config_name)
    )
    files = [README_FILENAME, TRAIN_FILENAME, RESULTS_FILENAME]
    if serializer.metadata_path.exists():
        files.append(METADATA_FILENAME)
    plan = PushPlan(
        repo_id=repo_id,
        url=f"https://huggingface.co/datasets/{repo_id}",
        files=files,
        private=private,
        commit_message=commit_message or f"Add {len(kept)} collected episode(s)",
        num_episodes=len(kept),
    )
    if dry_run:
        return plan
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id=repo_id, repo_type="dataset", private=private, exist_ok=True)
    api.upload_folder(
        folder_path=str(output_dir),
        repo_id=repo_id,
        repo_type="dataset",
        allow_patterns=files,
        commit_message=plan.commit_message,
    )
    return plan.url


__all__ = [
    "DATASET_DIRNAME",
    "METADATA_FILENAME",
    "README_FILENAME",
    "RESULTS_FILENAME",
    "TRAIN_FILENAME",
    "CollectResult",
    "CollectRunner",
    "EpisodeRecord",
    "PushPlan",
    "RolloutSerializer",
    "build_dataset_readme",
    "build_model_step",
    "model_call_record",
    "push_to_hf_hub",
    "write_dataset",
    "write_train_jsonl",
]
