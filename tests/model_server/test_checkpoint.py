"""The converted checkpoint is a plain float32 one that transformers loads and trains."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from openenv.models.checkpoint import DEFAULT_MODEL_NAME, ensure_checkpoint, load_model


def test_a_checkpoint_that_still_names_its_gguf_source_is_repaired(
    real_model: Any, tmp_path: Path
) -> None:
    source = ensure_checkpoint()
    config = json.loads((source / "config.json").read_text())
    assert "quantization_config" not in config
    # A folder converted before the GGUF origin was dropped: its config still names it.
    old = tmp_path / DEFAULT_MODEL_NAME
    old.mkdir()
    for entry in source.iterdir():
        if entry.name != "config.json":
            os.symlink(entry, old / entry.name)
    stale = {**config, "quantization_config": {"quant_method": "gguf", "dequantize": False}}
    (old / "config.json").write_text(json.dumps(stale))
    assert ensure_checkpoint(tmp_path) == old
    assert "quantization_config" not in json.loads((old / "config.json").read_text())
    model, _ = load_model(old)
    # Plain weights: nothing tells a Trainer they are quantized (it refuses to train those).
    assert not getattr(model, "is_quantized", False)
    assert getattr(model, "hf_quantizer", None) is None
    assert all(p.requires_grad for p in model.parameters())
