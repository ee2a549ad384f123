"""examples/real_model_rollout.py as a user runs it: it starts the model and the environments
itself, plays a harness episode and a tool-calling episode, and its last line says what was
recorded."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.support.real_model import require_real_model
from tests.support.server import REPO

SCRIPT = REPO / "examples" / "real_model_rollout.py"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_example_records_every_call_of_both_episodes() -> None:
    require_real_model()
    if importlib.util.find_spec("minisweagent") is None:
        pytest.skip("mini-swe-agent is not installed (the `harness` extra)")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, timeout=850
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["model"] == "SmolLM2-135M-Instruct" and summary["engine"] == "transformers"
    assert summary["episodes"] == 2 and len(summary["rewards"]) == 2
    # Every call the model server answered is in the record, each with its tokens.
    assert summary["model_calls"] == summary["calls_recorded"] >= 2
    assert summary["token_ids"] and summary["logprobs"] and summary["token_ids_match_text"]
    # The rewards are the environments' own grades: numbers, never a missing reward.
    assert all(isinstance(reward, float) for reward in summary["rewards"])
    assert summary["seconds"] > 0
