"""Token-by-token generation with transformers: the inference engine behind the model server.

A plain decode loop over the model's KV cache, so that every generated token is known as it
is made, with its id and its log-probability, and can be streamed at once. Log-probabilities
are the model's own (log-softmax of the raw logits, before temperature, top-k or top-p), as
vLLM reports them by default: what a trainer needs for importance ratios. Sampling uses
transformers' own logits warpers and a per-request `torch.Generator`, so a request with a seed
gives the same tokens every time.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .tool_format import messages_for_template

__all__ = [
    "ContextLengthError",
    "GeneratedToken",
    "GenerationEngine",
    "SamplingParams",
    "sampling_generator",
]


class ContextLengthError(ValueError):
    """The prompt does not fit the model's context window."""


@dataclass
class SamplingParams:
    """What a request asks of the sampler (OpenAI's names; temperature 0 is greedy)."""

    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    top_logprobs: int = 0
    #: OpenAI's logit_bias: token id -> a number added to its logit before sampling.
    logit_bias: dict[int, float] = field(default_factory=dict)
    #: Ends the answer once the text so far satisfies it (a required tool call is complete).
    end_when: Callable[[str], bool] | None = None


@dataclass
class GeneratedToken:
    """One generated token: its id, log-probability, the text it adds (possibly empty while a
    multi-byte character is incomplete) and, when asked, the most likely alternatives."""

    token_id: int
    logprob: float
    text: str
    top: list[tuple[int, float]] = field(default_factory=list)
    finish_reason: str | None = None


class GenerationEngine:
    """A causal LM and its tokenizer; `generate` is thread-safe (one generation at a time: on
    a CPU a second one would only halve the speed of the first)."""

    def __init__(self, model: Any, tokenizer: Any, *, context_length: int | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        config = getattr(model, "config", None)
        self.context_length = int(
            context_length or getattr(config, "max_position_embeddings", 0) or 2048
        )
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        ids = eos if isinstance(eos, list) else [eos]
        ids.append(tokenizer.eos_token_id)
        self.stop_token_ids = frozenset(int(i) for i in ids if i is not None)
        self._lock = threading.Lock()
        # transformers 5.x renamed the cache argument; older 5.x releases still take the old one.
        forward = inspect.signature(model.forward).parameters if hasattr(model, "forward") else {}
        self._cache_arg = "cache" if "cache" in forward else "past_key_values"
        self._trim_logits = "logits_to_keep" in forward
        template = getattr(tokenizer, "chat_template", None) or ""
        self.template_has_tools = "tools" in template

    # -- prompts ---------------------------------------------------------------------------------

    def prompt_ids(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """The chat template applied to ``messages``, ready for the assistant's answer. A
        template without tool support gets the tools in the `tool_format` way."""
        if tools and self.template_has_tools:
            rendered = self.tokenizer.apply_chat_template(
                [dict(m) for m in messages],
                tools=list(tools),
                add_generation_prompt=True,
                tokenize=False,
            )
        else:
            rendered = self.tokenizer.apply_chat_template(
                messages_for_template(messages, tools),
                add_generation_prompt=True,
                tokenize=False,
            )
        ids = list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])
        if len(ids) >= self.context_length:
            raise ContextLengthError(
                f"this model's maximum context length is {self.context_length} tokens; the "
                f"messages take {len(ids)}"
            )
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    # -- generation ------------------------------------------------------------------------------

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        cancelled: threading.Event | None = None,
        generator: Any = None,
        forced: Sequence[Sequence[int]] = (),
    ) -> Iterator[GeneratedToken]:
        """Yield tokens as they are made; the last one carries ``finish_reason`` (``stop`` at
        an end-of-turn token or a stop string, ``length`` at ``max_tokens`` or the context's
        end, ``abort`` when ``cancelled`` is set). The answer starts with one of the ``forced``
        token sequences (the opening of a required tool call, one per tool), the one the model
        finds likeliest at temperature 0, else sampled by the model's own probabilities for
        each; forced tokens are reported with the model's logprobs for them."""
        import torch

        budget = min(params.max_tokens, self.context_length - len(prompt_ids))
        if budget <= 0:
            return
        if generator is None:
            generator = sampling_generator(params.seed)
        warpers = _warpers(params)
        with self._lock, torch.inference_mode():
            start = self._choose(prompt_ids, forced, params, generator) if forced else []
            bias = _bias_vector(params.logit_bias)
            output = self._forward(torch.tensor([list(prompt_ids)], dtype=torch.long), None)
            past = self._cache_of(output)
            logits = output.logits[:, -1, :].float()
            generated: list[int] = []
            text, sent = "", 0  # the answer so far, and how much of it was yielded
            for index in range(budget):
                raw = torch.log_softmax(logits, dim=-1)
                if index < len(start):
                    token = int(start[index])
                elif params.temperature <= 0:
                    token = int(torch.argmax(_biased(logits, bias), dim=-1).item())
                else:
                    scores = _biased(logits, bias)
                    history = torch.tensor([list(prompt_ids) + generated], dtype=torch.long)
                    for warper in warpers:
                        scores = warper(history, scores)
                    probs = torch.softmax(scores, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generator).item())
                generated.append(token)
                top: list[tuple[int, float]] = []
                if params.top_logprobs:
                    values, indices = torch.topk(raw[0], params.top_logprobs)
                    top = [(int(i), float(v)) for i, v in zip(indices, values, strict=True)]
                finish = None
                ready = sent  # how much of the text may be yielded now
                if token in self.stop_token_ids:
                    finish, ready = "stop", len(text)
                else:
                    decoded = self.decode(generated)
                    if not decoded.endswith("\ufffd"):  # else half of a multi-byte character
                        text = decoded
                        hit = _first_stop(text, params.stop)
                        if hit is not None:
                            finish, text, ready = "stop", text[:hit], hit
                        elif params.end_when is not None and params.end_when(text):
                            finish = "stop"
                        else:
                            ready = len(text) - _stop_prefix_length(text, params.stop)
                if finish is None and index == budget - 1:
                    finish = "length"
                if finish is None and cancelled is not None and cancelled.is_set():
                    finish = "abort"
                if finish is not None:
                    ready = len(text)
                delta, sent = text[sent:ready], max(sent, ready)
                yield GeneratedToken(token, float(raw[0, token].item()), delta, top, finish)
                if finish is not None:
                    return
                output = self._forward(torch.tensor([[token]], dtype=torch.long), past)
                past = self._cache_of(output)
                logits = output.logits[:, -1, :].float()

    def _choose(
        self,
        prompt_ids: Sequence[int],
        options: Sequence[Sequence[int]],
        params: SamplingParams,
        generator: Any,
    ) -> list[int]:
        """One of `options` to start the answer with, by the model's probability of each
        after the prompt: one batched forward pass over every option, left-padded so they all
        end together."""
        import torch

        if len(options) == 1:
            return list(options[0])
        longest = max(len(option) for option in options)
        total = len(prompt_ids) + longest
        rows, masks = [], []
        for option in options:
            pad = longest - len(option)
            rows.append([0] * pad + list(prompt_ids) + list(option))
            masks.append([0] * pad + [1] * (total - pad))
        mask = torch.tensor(masks, dtype=torch.long)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        kwargs: dict[str, Any] = {
            "input_ids": torch.tensor(rows, dtype=torch.long),
            "attention_mask": mask,
            "position_ids": positions,
            "use_cache": False,
        }
        if self._trim_logits:
            kwargs["logits_to_keep"] = longest + 1
        logits = self.model(**kwargs).logits[:, -(longest + 1) : -1, :].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        scores = []
        for row, option in enumerate(options):
            offset = longest - len(option)  # the option's tokens are the last len(option)
            picked = logprobs[row, offset:, :].gather(
                -1, torch.tensor(list(option), dtype=torch.long).unsqueeze(-1)
            )
            scores.append(float(picked.sum()))
        if params.temperature <= 0:
            best = max(range(len(options)), key=lambda i: scores[i])
        else:
            weights = torch.softmax(torch.tensor(scores) / params.temperature, dim=-1)
            best = int(torch.multinomial(weights, 1, generator=generator).item())
        return list(options[best])

    def _forward(self, input_ids: Any, cache: Any) -> Any:
        kwargs: dict[str, Any] = {"input_ids": input_ids, "use_cache": True}
        if cache is not None:
            kwargs[self._cache_arg] = cache
        if self._trim_logits:
            kwargs["logits_to_keep"] = 1  # a long prompt's logits for every position are unused
        return self.model(**kwargs)

    @staticmethod
    def _cache_of(output: Any) -> Any:
        cache = getattr(output, "cache", None)
        return cache if cache is not None else output.past_key_values


def sampling_generator(seed: int | None) -> Any:
    """A `torch.Generator` for one request: seeded when the request names a seed (the same
    tokens every time), else from fresh entropy."""
    import torch

    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def _bias_vector(bias: Mapping[int, float]) -> Any:
    """``(ids, values)`` tensors for `_biased`, or None without a bias."""
    import torch

    if not bias:
        return None
    ids = torch.tensor(list(bias), dtype=torch.long)
    return ids, torch.tensor([float(v) for v in bias.values()])


def _biased(logits: Any, bias: Any) -> Any:
    if bias is None:
        return logits
    ids, values = bias
    shifted = logits.clone()
    shifted[0, ids] += values
    return shifted


def _stop_prefix_length(text: str, stops: Sequence[str]) -> int:
    """The longest tail of ``text`` that could still grow into a stop string: held back."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if stop.startswith(text[-size:]):
                longest = size
                break
    return longest


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    found = [text.find(stop) for stop in stops if stop and stop in text]
    return min(found) if found else None


class _OpenAIPenalties:
    """OpenAI's presence and frequency penalties over the tokens generated so far."""

    def __init__(self, presence: float, frequency: float) -> None:
        self.presence = presence
        self.frequency = frequency
        self.prompt_length: int | None = None

    def __call__(self, history: Any, scores: Any) -> Any:
        import torch

        if self.prompt_length is None:
            self.prompt_length = history.shape[1]
        generated = history[0, self.prompt_length :]
        if generated.numel() == 0:
            return scores
        counts = torch.bincount(generated, minlength=scores.shape[-1]).to(scores.dtype)
        penalty = self.frequency * counts + self.presence * (counts > 0).to(scores.dtype)
        return scores - penalty.unsqueeze(0)


def _warpers(params: SamplingParams) -> list[Any]:
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    warpers: list[Any] = []
    if params.repetition_penalty != 1.0:
        warpers.append(RepetitionPenaltyLogitsProcessor(params.repetition_penalty))
    if params.presence_penalty or params.frequency_penalty:
        warpers.append(_OpenAIPenalties(params.presence_penalty, params.frequency_penalty))
    if params.temperature > 0 and params.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k > 0:
        warpers.append(TopKLogitsWarper(params.top_k))
    if params.top_p < 1.0:
        warpers.append(TopPLogitsWarper(params.top_p))
    if params.min_p > 0:
        warpers.append(MinPLogitsWarper(params.min_p))
    return warpers
