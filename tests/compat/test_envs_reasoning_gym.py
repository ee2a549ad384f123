"""PUBLISHED CLIENT -> OUR reasoning_gym_env.

published_reasoning_gym_script.py runs in the compat venv (openenv==0.10.0) and uses the
environment as OpenEnv's README does: reset options that pick and seed a dataset, one
`{"answer"}` step per question. The observations must carry OpenEnv's fields with its values:
the question on reset, the score, correct answer and entry metadata after the step.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import serve

pytest.importorskip(
    "reasoning_gym_env",
    reason="reasoning_gym_env is outside the uv workspace (reasoning-gym needs a C compiler); "
    "`uv pip install -e envs/reasoning_gym_env` installs it",
)

pytestmark = pytest.mark.compat

SCRIPT = Path(__file__).resolve().parent / "published_reasoning_gym_script.py"


@pytest.fixture(scope="module")
def seen(compat_python: str) -> Iterator[dict[str, Any]]:
    with serve("reasoning_gym_env.server.app:app") as server:
        proc = subprocess.run(
            [compat_python, str(SCRIPT), server.url],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=SCRIPT.parent,  # not the repo root: nothing of ours is importable
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert "error" not in result, result.get("traceback")
    yield result


def test_openenv_episodes_and_fields(seen: dict[str, Any]) -> None:
    reset = seen["reset"]
    assert (reset["reward"], reset["done"]) == (0.0, False)
    obs = reset["observation"]
    assert "legs" in obs["question"]
    assert obs["score"] is None and obs["correct_answer"] is None
    assert obs["dataset_metadata"] is None
    wrong = seen["wrong"]
    assert (wrong["reward"], wrong["done"]) == (0.0, True)
    assert wrong["observation"]["score"] == 0.0 and wrong["observation"]["question"] is None
    assert wrong["observation"]["dataset_metadata"]["source_dataset"] == "leg_counting"
    assert wrong["observation"]["correct_answer"].isdigit()
    assert seen["next"]["observation"]["question"] != obs["question"]
    assert seen["again"]["observation"]["question"] == obs["question"]
    right = seen["right"]
    assert (right["reward"], right["done"]) == (1.0, True)
    assert right["observation"]["score"] == 1.0


def test_composite_unknown_dataset_and_state(seen: dict[str, Any]) -> None:
    assert seen["composite"]["observation"]["question"]
    assert seen["composite_step"]["done"] is True
    source = seen["composite_step"]["observation"]["dataset_metadata"]["source_dataset"]
    assert source in ("chain_sum", "leg_counting")
    assert seen["state"]["step_count"] == 1 and isinstance(seen["state"]["episode_id"], str)
    assert "no_such_dataset" in seen["unknown_dataset"]
    assert "VALIDATION_ERROR" in seen["unknown_dataset"]
    # The refused reset left the composite in place: its next question.
    assert seen["after_error"]["observation"]["question"]
