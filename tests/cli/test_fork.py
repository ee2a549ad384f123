"""`openenv fork`: the plan, refused input, and the real path.

The Hugging Face Hub is not reachable from the test machine: the real path runs against
`StandInHub` (a local stand-in for the Hub endpoints, see tests/cli/test_push.py) and against a
closed port.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from tests.cli.test_push import StandInHub
from tests.support.server import free_port

OPENENV = str(Path(sys.executable).with_name("openenv"))
SECRET_VALUE = "fork-secret-that-must-not-leak"


def fork(*args: str, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [OPENENV, "fork", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env or {**os.environ},
    )


def test_dry_run_prints_the_plan_without_the_hub(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}",
    }
    env.pop("HF_TOKEN", None)  # no token needed
    result = fork(
        "openenv/echo_env",
        "--dry-run",
        "-r",
        "my-echo",
        "--private",
        "-e",
        "MODE=fast",
        "--set-env",
        "LEVEL=2",
        "-s",
        f"API_KEY={SECRET_VALUE}",
        "--secret",
        f"OTHER={SECRET_VALUE}",
        "-H",
        "t4-small",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["from"] == "openenv/echo_env"
    assert plan["to"] == "<your-hf-username>/my-echo"
    assert plan["private"] is True
    assert plan["hardware"] == "t4-small"
    assert plan["variables"] == {"MODE": "fast", "LEVEL": "2"}
    assert plan["secrets"] == ["API_KEY", "OTHER"]
    assert SECRET_VALUE not in result.stdout + result.stderr


def test_dry_run_defaults() -> None:
    result = fork("someone/space", "--dry-run")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["to"] == "<your-hf-username>/space"
    assert plan["hardware"] == "cpu-basic"  # never paid hardware unless asked
    assert plan["private"] is None  # same visibility as the source
    assert plan["variables"] == {} and plan["secrets"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["echo_env"], "must be OWNER/NAME"),
        (["a/b/c"], "must be OWNER/NAME"),
        (["/b"], "must be OWNER/NAME"),
        (["a/"], "must be OWNER/NAME"),
        (["a/b", "-r", "x/y/z"], "more than one '/'"),
        (["a/b", "-e", "NOVALUE"], "--set-env expects KEY=VALUE"),
        (["a/b", "-e", "K=1", "-s", "K=2"], "given both as --set-env and as --set-secret"),
    ],
)
def test_refused_input(args: list[str], message: str) -> None:
    result = fork(*args, "--dry-run")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_hub_is_a_clear_error() -> None:
    closed = free_port()
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{closed}", "HF_TOKEN": "hf_test"}
    result = fork("openenv/echo_env", env=env)
    assert result.returncode == 1
    assert "could not reach the Hugging Face Hub" in result.stderr
    assert f"127.0.0.1:{closed}" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_missing_token_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "http://127.0.0.1:9"}
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"):
        env.pop(name, None)
    result = fork("openenv/echo_env", env=env)
    assert result.returncode == 1
    assert "no Hugging Face token found" in result.stderr
    assert "huggingface-cli login" in result.stderr
    assert "Traceback" not in result.stderr


def test_fork_duplicates_on_a_stand_in_hub() -> None:
    with StandInHub() as hub:
        result = fork(
            "openenv/echo_env",
            "-r",
            "my-echo",
            "--private",
            "-e",
            "MODE=fast",
            "-s",
            "API_KEY",
            "-H",
            "t4-small",
            env=hub.env(API_KEY=SECRET_VALUE),
        )
    assert result.returncode == 0, result.stderr
    assert not hub.unknown, hub.unknown
    assert result.stdout.strip() == f"{hub.url}/spaces/tester/my-echo"
    [made] = hub.duplicated
    assert made["from"] == "openenv/echo_env"
    assert made["repository"] == "tester/my-echo"
    assert made.get("private") is True or made.get("visibility") == "private"
    assert made["hardware"] == "t4-small"
    assert made["variables"] == [{"key": "MODE", "value": "fast"}]
    assert made["secrets"] == [{"key": "API_KEY", "value": SECRET_VALUE}]
    assert SECRET_VALUE not in result.stdout + result.stderr


def test_fork_defaults_on_a_stand_in_hub() -> None:
    with StandInHub(user="alice") as hub:
        result = fork("openenv/echo_env", env=hub.env())
    assert result.returncode == 0, result.stderr
    [made] = hub.duplicated
    assert made["repository"] == "alice/echo_env"
    assert made["hardware"] == "cpu-basic"
    assert "private" not in made and "visibility" not in made  # as the source
    assert "variables" not in made and "secrets" not in made
    assert result.stdout.strip() == f"{hub.url}/spaces/alice/echo_env"


def test_hub_refusals_are_explained() -> None:
    with StandInHub(missing=("openenv/nope",), existing=("tester/echo_env",)) as hub:
        missing = fork("openenv/nope", env=hub.env())
        taken = fork("openenv/echo_env", env=hub.env())
    assert missing.returncode == 1
    assert "repository not found" in missing.stderr and "OWNER/NAME" in missing.stderr
    assert taken.returncode == 1
    assert "already exists" in taken.stderr and "--repo-id" in taken.stderr
    assert "Traceback" not in missing.stderr + taken.stderr
