"""`openenv model` as a user runs it: a real process serving the real model on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from openenv.cli.__main__ import app
from openenv.testing.live_server import free_port


def test_model_path_prints_the_converted_checkpoint(real_model: Any) -> None:
    outcome = CliRunner().invoke(app, ["model", "path"])
    assert outcome.exit_code == 0, outcome.output
    folder = Path(outcome.stdout.strip())
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def test_serve_refuses_a_folder_that_is_no_checkpoint(tmp_path: Path) -> None:
    outcome = CliRunner().invoke(app, ["model", "serve", "--checkpoint", str(tmp_path)])
    assert outcome.exit_code == 2
    assert "not a transformers checkpoint" in outcome.output


def test_model_serve_answers_chat_completions_until_stopped(real_model: Any) -> None:
    port = free_port()
    command = [sys.executable, "-m", "openenv.cli", "model", "serve", "--port", str(port)]
    command += ["--name", "smol", "--max-tokens-limit", "4"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy()
    ) as server:
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the model server did not come up"
                time.sleep(0.2)
            reply = httpx.post(
                url + "/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 50},
                timeout=120,
            ).json()
            assert reply["model"] == "smol"
            assert reply["usage"]["completion_tokens"] <= 4  # the limit caps what was asked
        finally:
            server.terminate()
            server.wait(30)
        assert "Serving smol" in (server.stderr.read() if server.stderr else "")
