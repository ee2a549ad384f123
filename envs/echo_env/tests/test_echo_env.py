"""The echo server as its README starts it: `python -m echo_env.server.app`, the shared main."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from echo_env import CallToolAction, EchoEnv
from openenv.core.manifest import load_manifest
from openenv.testing.live_server import free_port, stop_process, wait_healthy

MANIFEST = load_manifest(Path(__file__).resolve().parents[1])
SERVER = [sys.executable, "-m", "echo_env.server.app"]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = free_port()
    # No --host: the server binds loopback unless told otherwise.
    process = subprocess.Popen([*SERVER, "--port", str(port)], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield url
    finally:
        stop_process(process)


def test_metadata_is_the_manifest(server: str) -> None:
    metadata = httpx.get(f"{server}/metadata").json()
    assert metadata["name"] == MANIFEST.name == "echo_env"
    assert metadata["description"] == MANIFEST.description
    assert metadata["version"] == MANIFEST.version


def test_tools_over_the_wire(server: str) -> None:
    with EchoEnv(base_url=server).sync() as env:
        assert env.reset().observation.echoed_message == "Echo environment ready!"
        result = env.step(CallToolAction(tool_name="echo_message", arguments={"message": "Hi"}))
        assert result.observation.result["data"] == "Hi"
        assert env.call_tool("echo_with_length", message="Hi") == {"message": "Hi", "length": 2}


def test_help_comes_from_the_manifest() -> None:
    out = subprocess.run([*SERVER, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert f"Serve echo_env: {MANIFEST.description}" in text
    assert "default: 127.0.0.1" in text and f"default: {MANIFEST.port}" in text
    for flag in ("--host", "--port", "--workers", "--reload"):
        assert flag in text


def test_bad_arguments_are_refused_before_serving() -> None:
    out = subprocess.run([*SERVER, "--workers", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--workers must be 1 or more" in out.stderr
