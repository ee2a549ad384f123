"""`openenv build` makes an image that serves the environment, on a real Docker engine."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from echo_env import CallToolAction, EchoEnv
from tests.support.server import REPO

from .conftest import published_url, run_hardened, wait_for_health

OPENENV = str(Path(sys.executable).with_name("openenv"))

pytestmark = pytest.mark.slow


def build(env_dir: Path, tag: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [OPENENV, "build", str(env_dir), "--tag", tag, *extra],
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def echo_image(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tag = f"openenv-echo:test-{uuid.uuid4().hex[:8]}"
    context = tmp_path_factory.mktemp("context")
    builder_filter = {"dangling": True, "label": "org.openenv.stage=builder"}
    # Another build (running at the same time, or killed) may leave its own: not this one's.
    before = {image.id for image in docker_client.images.list(filters=builder_filter)}
    result = build(REPO / "envs" / "echo_env", tag, "--keep-context", str(context))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == tag
    wheels = {path.name.split("-")[0] for path in (context / "wheels").glob("*.whl")}
    # This checkout's openenv, never the published package of the same name.
    assert {"openenv", "openenv_echo", "fastmcp", "uvicorn"} <= wheels
    ours = importlib.metadata.version("openenv")
    assert next((context / "wheels").glob("openenv-*.whl")).name.startswith(f"openenv-{ours}-")
    assert (context / "Dockerfile").is_file() and not (context / ".venv").exists()
    # The builder stage's image is removed, not left dangling.
    after = {image.id for image in docker_client.images.list(filters=builder_filter)}
    assert after <= before
    yield tag
    docker_client.images.remove(tag, force=True)


@pytest.fixture()
def echo_container(docker_client: Any, echo_image: str) -> Iterator[Any]:
    container = run_hardened(docker_client, echo_image)
    try:
        yield container
    finally:
        container.remove(force=True)


def test_the_image_serves_an_episode(echo_container: Any) -> None:
    url = published_url(echo_container)
    wait_for_health(echo_container, url)
    with EchoEnv(base_url=url).sync() as env:
        env.reset()
        result = env.step(CallToolAction(tool_name="echo_message", arguments={"message": "hi"}))
        assert result.observation.result["data"] == "hi"
        assert env.state().step_count == 1
        # Code mode in the hardened container: the sandbox's process fallback, workspace in /tmp.
        code = env.execute_code("result = [echo_message(w) for w in ('a', 'b')]")
        assert (code.status, code.result, code.error) == ("ok", ["a", "b"], None)
        assert code.metadata["backend"] in ("bubblewrap", "process")
        assert env.state().step_count == 2


def test_the_server_is_pid_1_and_not_root(echo_container: Any) -> None:
    wait_for_health(echo_container, published_url(echo_container))
    code, out = echo_container.exec_run(["sh", "-c", "id -u; tr '\\0' ' ' < /proc/1/cmdline"])
    assert code == 0
    uid, cmdline = out.decode().strip().splitlines()
    assert uid != "0"
    assert cmdline.split()[:4] == [
        "python",
        "-m",
        "openenv.core.env_server.boot",
        "echo_env.server.app",
    ]


def test_every_module_of_the_image_is_compiled(echo_container: Any) -> None:
    """The root is read-only when the provider runs the image: a module without bytecode
    would be compiled anew at every start."""
    script = (
        "import pathlib, importlib.util; "
        "missing = [str(p) for p in pathlib.Path('/app/.venv/lib').rglob('*.py') "
        "if not pathlib.Path(importlib.util.cache_from_source(str(p))).is_file()]; "
        "print(len(missing), missing[:5])"
    )
    code, out = echo_container.exec_run(["python", "-c", script])
    assert code == 0, out
    assert out.decode().startswith("0 "), out.decode()


def test_the_container_is_read_only_and_cannot_gain_privileges(echo_container: Any) -> None:
    wait_for_health(echo_container, published_url(echo_container))
    script = "grep NoNewPrivs /proc/1/status; touch ~openenv/x 2>&1; touch /tmp/x && echo tmp-ok"
    _, out = echo_container.exec_run(["sh", "-c", script])
    text = out.decode()
    assert "NoNewPrivs:\t1" in text
    assert "Read-only file system" in text and "tmp-ok" in text
    _, home = echo_container.exec_run(["sh", "-c", "echo $HOME"])
    assert home.decode().strip() == "/tmp"


def test_the_image_holds_one_virtual_environment(echo_container: Any) -> None:
    _, out = echo_container.exec_run(["sh", "-c", "find / -xdev -name pyvenv.cfg 2>/dev/null"])
    assert out.decode().split() == ["/app/.venv/pyvenv.cfg"]


def test_the_healthcheck_reports_healthy(echo_container: Any) -> None:
    config = echo_container.image.attrs["Config"]["Healthcheck"]
    assert "/health" in " ".join(config["Test"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        echo_container.reload()
        status = echo_container.attrs["State"].get("Health", {}).get("Status")
        if status == "healthy":
            return
        assert status in ("starting", None), status
        time.sleep(1)
    raise AssertionError("the container never became healthy")


def test_stop_is_graceful(echo_container: Any) -> None:
    wait_for_health(echo_container, published_url(echo_container))
    echo_container.stop(timeout=20)
    echo_container.reload()
    # SIGKILL after the timeout would show as 137; uvicorn exits on SIGTERM at once.
    assert echo_container.attrs["State"]["ExitCode"] != 137
    logs = echo_container.logs().decode(errors="replace")
    assert "Shutting down" in logs or "shutdown complete" in logs.lower()


def test_build_refuses_a_folder_without_a_manifest(tmp_path: Path) -> None:
    result = build(tmp_path, "openenv-nothing:test")
    assert result.returncode == 2
    assert "openenv.yaml" in result.stderr


def test_build_refuses_a_base_image_it_cannot_pull(docker_client: Any) -> None:
    result = build(REPO / "envs" / "echo_env", "openenv-echo:never", "--base-image", "nope:404")
    assert result.returncode == 1
    assert "cannot be pulled here" in result.stderr


def test_base_only_reports_the_base_image_and_its_python(docker_client: Any) -> None:
    result = subprocess.run(
        [OPENENV, "build", "--base-only"], capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "openenv-base:latest"
    assert "Python 3." in result.stderr
    labels = docker_client.images.get("openenv-base:latest").labels
    assert labels["org.openenv.python"].startswith("3.")
    # Remade whenever the package list changes (environments rely on git and make in it).
    assert "git" in labels["org.openenv.packages"].split(",")
