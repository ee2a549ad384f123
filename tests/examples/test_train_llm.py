"""examples/train_llm.py runs every stage end to end (a very short run) and writes its outputs.

How well the model learns is the full run's business (docs/training.md): rewards this short
a run reaches are noise, so only their range is checked here.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.server import REPO

pytestmark = pytest.mark.slow


def _require_training_packages() -> None:
    # Checked in the test, not at import: importing torch costs seconds at every collection.
    for module in ("torch", "transformers", "trl", "matplotlib", "datasets"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is missing: it is in the `training` extra")
    if importlib.util.find_spec("reasoning_gym_env") is None:
        pytest.skip("reasoning_gym_env is missing: pip install -e envs/reasoning_gym_env")


@pytest.mark.timeout(600)
def test_train_llm_quick_run_writes_its_outputs(tmp_path: Path) -> None:
    _require_training_packages()
    out_dir = tmp_path / "run"
    plot = tmp_path / "plot.png"
    done = subprocess.run(
        [
            sys.executable,
            "examples/train_llm.py",
            "--quick",
            "--out-dir",
            str(out_dir),
            "--plot",
            str(plot),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "held-out mean reward, greedy: random init" in done.stdout

    rollouts = [
        json.loads(line) for line in (out_dir / "teacher_rollouts.jsonl").read_text().splitlines()
    ]
    assert len(rollouts) == 40
    # The teacher computes the answers, and the served environment's verifier agrees.
    assert all(row["reward"] == 1.0 for row in rollouts)
    assert all(row["answer"].startswith("<answer>") for row in rollouts)

    results = json.loads((out_dir / "results.json").read_text())
    assert set(results["eval"]) == {"random_init", "fine_tuned", "grpo"}
    for scores in results["eval"].values():
        for mode in ("greedy", "sampled"):
            solved, reward = scores[f"{mode}_solved"], scores[f"{mode}_reward"]
            assert 0.0 <= solved <= reward + 1e-9 <= 1.0 + 1e-9
    # GRPO ran its steps against the served environment and logged the rewards it got.
    assert [entry["step"] for entry in results["grpo_log"]] == [1, 2]
    assert all(0.0 <= entry["reward"] <= 1.0 for entry in results["grpo_log"])
    assert plot.read_bytes().startswith(b"\x89PNG")
