"""`openenv push --interface` stages a Space whose App tab (README `base_path`) shows the
playground: the staged folder is served as its Dockerfile would serve it (a new virtual
environment from the staged wheels, the Dockerfile's ENV and CMD) and loaded in Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.server import REPO, free_port, stop_process, wait_healthy
from tests.web.browser import browser, click_and_wait, open_playground, reset, screenshot

__all__ = ["browser"]

pytestmark = pytest.mark.slow

OPENENV = str(Path(sys.executable).with_name("openenv"))


def _stage(tmp_path: Path) -> Path:
    stage = tmp_path / "space"
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    env.pop("HF_TOKEN", None)
    env["HF_HOME"] = str(tmp_path / "no-hf-home")  # a dry run needs no login
    args = ["push", str(REPO / "envs/echo_env"), "--dry-run", "--stage-dir", str(stage)]
    result = subprocess.run(
        [OPENENV, *args, "--interface"], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["interface"] is True
    return stage


def _space_settings(stage: Path) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """README front matter, the final stage's single-line ENV values, and the CMD."""
    readme = (stage / "README.md").read_text()
    front = yaml.safe_load(readme[4:].split("\n---\n", 1)[0])
    dockerfile = (stage / "Dockerfile").read_text()
    final_stage = dockerfile.rsplit("\nFROM ", 1)[1]
    env = dict(re.findall(r"^ENV (\w+)=(\S+)\s*$", final_stage, re.M))
    cmd = json.loads(re.findall(r"^CMD (\[.*\])\s*$", final_stage, re.M)[-1])
    return front, env, cmd


def test_pushed_space_app_tab_shows_the_playground(browser: Any, tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (it builds the Space's environment)")
    stage = _stage(tmp_path)
    front, space_env, cmd = _space_settings(stage)
    assert front["base_path"] == "/web" and front["sdk"] == "docker"
    assert space_env.get("ENABLE_WEB_INTERFACE") == "true"

    # What the Dockerfile's builder stage does: a new environment from the staged wheels only.
    venv = tmp_path / "venv"
    wheels = sorted(str(path) for path in (stage / "wheels").glob("*.whl"))
    subprocess.run([uv, "venv", "-q", str(venv), "--python", sys.executable], check=True)
    install = [uv, "pip", "install", "-q", "--python", str(venv / "bin/python")]
    subprocess.run([*install, "--find-links", str(stage / "wheels"), *wheels], check=True)

    port = free_port()
    argv = [str(venv / "bin" / cmd[0]), *cmd[1:]]
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    environ.update({name: value for name, value in space_env.items() if "$" not in value})
    workdir = tmp_path / "home"  # not the checkout: the Space has only what the wheels hold
    workdir.mkdir()
    process = subprocess.Popen(argv, env=environ, cwd=workdir)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        try:
            page = open_playground(context, url + front["base_path"])  # the App tab's address
            reset(page, seed=1)
            page.fill("form[data-tool=echo_message] [name=message]", "hello Space")
            click_and_wait(page, "form[data-tool=echo_message] button")
            assert "hello Space" in page.inner_text("#observation")
            screenshot(page, "space-echo")
        finally:
            context.close()
    finally:
        stop_process(process)
