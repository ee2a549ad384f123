"""A captured agent run as training data: one `TrainingTurn` per model call, token ids,
per-token logprobs and a loss mask, in a versioned container a trainer can validate."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TrainingTurn(BaseModel):
    """One model call. `loss_mask` spans prompt and completion tokens (1 = train on it)."""

    model_config = ConfigDict(extra="forbid")

    node_id: str
    prompt_token_ids: list[int] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    per_token_logps: list[float] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    request: dict[str, Any] = Field(default_factory=dict)
    response: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _lengths_agree(self) -> TrainingTurn:
        # A mismatch here means the capture lost tokens: training on it would misalign losses.
        completion = len(self.completion_token_ids)
        if self.per_token_logps and len(self.per_token_logps) != completion:
            raise ValueError(
                f"turn {self.node_id!r}: {len(self.per_token_logps)} logprobs for "
                f"{completion} completion tokens"
            )
        total = len(self.prompt_token_ids) + completion
        if self.loss_mask and len(self.loss_mask) != total:
            raise ValueError(
                f"turn {self.node_id!r}: loss mask of {len(self.loss_mask)} for {total} tokens"
            )
        return self


class TrainingTrace(BaseModel):
    """Every model call of one rollout, in call order."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    turns: list[TrainingTurn] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_nodes(self) -> TrainingTrace:
        seen: set[str] = set()
        for turn in self.turns:
            if turn.node_id in seen:
                raise ValueError(f"node id {turn.node_id!r} appears twice")
            seen.add(turn.node_id)
        return self

    @classmethod
    def from_entries(cls, entries: list[dict[str, Any]]) -> TrainingTrace:
        """Build from `TraceEntry` dicts (a proxy's capture); the node id is taken from
        `metadata["node_id"]`, else the entry's position."""
        turns = []
        for index, entry in enumerate(entries):
            metadata = dict(entry.get("metadata") or {})
            node_id = str(metadata.pop("node_id", index))
            if entry.get("reward") is not None:
                metadata["reward"] = entry["reward"]
            turns.append(
                TrainingTurn(
                    node_id=node_id,
                    prompt_token_ids=list(entry.get("prompt_ids") or []),
                    completion_token_ids=list(entry.get("completion_ids") or []),
                    per_token_logps=list(entry.get("logprobs") or []),
                    loss_mask=list(entry.get("loss_mask") or []),
                    request=dict(entry.get("request") or {}),
                    response=dict(entry.get("response") or {}),
                    metadata=metadata,
                )
            )
        return cls(turns=turns)

    def to_trace_entries(self) -> list[dict[str, Any]]:
        """The inverse of `from_entries` (node ids go back into `metadata`)."""
        entries = []
        for turn in self.turns:
            metadata = dict(turn.metadata)
            reward = metadata.pop("reward", None)
            metadata["node_id"] = turn.node_id
            entry: dict[str, Any] = {
                "prompt_ids": list(turn.prompt_token_ids),
                "completion_ids": list(turn.completion_token_ids),
                "logprobs": list(turn.per_token_logps),
                "loss_mask": list(turn.loss_mask),
                "request": dict(turn.request),
                "response": dict(turn.response),
                "metadata": metadata,
                "reward": reward,
            }
            entries.append(entry)
        return entries


__all__ = ["TrainingTrace", "TrainingTurn"]
