"""PUBLISHED CLIENT -> OUR atari_env.

published_atari_script.py runs in the compat venv (openenv==0.10.0): its `GenericEnvClient`
names no frame format, so it must get OpenEnv's observation (`screen` as a flat int list,
`screen_shape`, `legal_actions`, `lives`, `episode_frame_number`, `frame_number`) and OpenEnv's
state fields, and OpenEnv's four-field action dicts must be accepted.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import serve

pytestmark = pytest.mark.compat

SCRIPT = Path(__file__).resolve().parent / "published_atari_script.py"
OPENENV_OBSERVATION = {
    "screen",
    "screen_shape",
    "legal_actions",
    "lives",
    "episode_frame_number",
    "frame_number",
}
OPENENV_STATE = {
    "episode_id",
    "step_count",
    "game_name",
    "obs_type",
    "full_action_space",
    "mode",
    "difficulty",
    "repeat_action_probability",
    "frameskip",
}


@pytest.fixture(scope="module")
def seen(compat_python: str) -> Iterator[dict[str, Any]]:
    with serve("atari_env.server.app:app") as server:
        proc = subprocess.run(
            [compat_python, str(SCRIPT), server.url],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=SCRIPT.parent,  # not the repo root: nothing of ours is importable
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield json.loads(proc.stdout)


def test_observations_carry_openenv_fields(seen: dict[str, Any]) -> None:
    reset = seen["reset"]
    assert OPENENV_OBSERVATION <= set(reset["keys"])
    assert (reset["reward"], reset["done"]) == (0.0, False)
    obs = reset["observation"]
    assert obs["screen_shape"] == [210, 160, 3] and reset["screen_len"] == 210 * 160 * 3
    assert reset["screen_ints"] and all(0 <= v <= 255 for v in reset["screen_head"])
    assert obs["legal_actions"] == [0, 1, 2, 3, 4, 5] and obs["lives"] == 0
    assert obs["frame_format"] == "list" and obs["episode_frame_number"] == 0
    for i, step in enumerate(seen["steps"], start=1):
        assert OPENENV_OBSERVATION <= set(step["keys"]) and step["screen_len"] == 100_800
        assert (step["reward"], step["done"]) == (0.0, False)
        assert step["observation"]["episode_frame_number"] == 4 * i  # frame skip 4
        assert step["observation"]["frame_number"] >= 4 * i


def test_out_of_range_action_is_an_error_and_the_game_goes_on(seen: dict[str, Any]) -> None:
    invalid = seen["invalid"]
    # the published client raises RuntimeError for any server error, OpenEnv's own included
    assert invalid is not None and invalid["type"] == "RuntimeError"
    assert "action_id" in invalid["message"] and "VALIDATION_ERROR" in invalid["message"]
    after = seen["after_invalid"]
    assert after["observation"]["episode_frame_number"] == 4 * 4 and not after["done"]


def test_compact_frames_reach_the_published_client_as_text(seen: dict[str, Any]) -> None:
    """OpenEnv's client offers no binary frames: a "bytes" frame comes as base64 in JSON."""
    assert seen["bytes_frame"] == {
        "format": "bytes",
        "shape": [210, 160, 3],
        "length": 100_800,
        "equals_list": True,
    }


def test_state_carries_openenv_fields(seen: dict[str, Any]) -> None:
    state = seen["state"]
    assert OPENENV_STATE <= set(state)
    assert (state["game_name"], state["obs_type"], state["full_action_space"]) == (
        "pong",
        "rgb",
        False,
    )
    assert (state["mode"], state["difficulty"], state["frameskip"]) == (None, None, 4)
    assert state["repeat_action_probability"] == 0.0 and state["step_count"] == 4
