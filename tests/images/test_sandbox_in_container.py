"""The execution sandbox inside a hardened environment image (non-root, no capabilities,
read-only root, tmpfs /tmp): bubblewrap cannot make namespaces there, so `auto` falls back to the
process backend with rlimits (the container is the boundary), and every limit still holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openenv.providers._docker import HARDENING
from tests.support.server import REPO

pytestmark = pytest.mark.slow

OPENENV = str(Path(sys.executable).with_name("openenv"))

SCRIPT = r"""
import json, os
from openenv.sandbox import Sandbox, SandboxLimits
box = Sandbox(limits=SandboxLimits(
    wall_time_s=60, memory_mb=128, max_processes=24, cpu_time_s=1, max_file_mb=1,
    max_output_bytes=10_000))
report = {"backend": box.backend, "uid": os.geteuid(), "workspace": box.workspace}
cases = {
    "ok": [box.python, "-c", "print(42)"],
    "fork bomb": [box.python, "-c", "import os\nwhile True: os.fork()"],
    "memory hog": [box.python, "-c", "a = []\nwhile True: a.append(bytearray(10**7))"],
    "cpu spin": [box.python, "-c", "while True: pass"],
    "big file": [box.python, "-c", "open('big', 'wb').write(bytes(5_000_000))"],
    "endless output": [box.python, "-c", "while True: print('x' * 999)"],
    "setsid leftover": ["sh", "-c", "setsid sleep 1234.5 & echo started"],
}
for name, argv in cases.items():
    report[name] = box.run(argv).status.value
box.close()
report["leftovers"] = [
    pid for pid in os.listdir("/proc")
    if pid.isdigit() and int(pid) != os.getpid()  # this script's own command line has it
    and b"1234.5" in open(f"/proc/{pid}/cmdline", "rb").read()
]
print(json.dumps(report))
"""


def test_the_sandbox_falls_back_and_holds_its_limits_in_a_hardened_container(
    docker_client: Any,
) -> None:
    tag = "openenv-test-sandbox-fallback:latest"
    built = subprocess.run(
        [OPENENV, "build", str(REPO / "envs" / "math_env"), "--tag", tag],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    try:
        output = docker_client.containers.run(
            tag,
            entrypoint=["python3", "-c", SCRIPT],
            remove=True,
            network_mode="none",
            **HARDENING,
        )
    finally:
        docker_client.images.remove(tag, force=True)
    report = json.loads(output.decode().strip().splitlines()[-1])
    assert report["backend"] == "process" and report["uid"] != 0, report
    assert report["workspace"].startswith("/tmp/"), report
    assert {k: v for k, v in report.items() if k not in ("backend", "uid", "workspace")} == {
        "ok": "ok",
        "fork bomb": "process_limit",
        "memory hog": "memory_limit",
        "cpu spin": "cpu_limit",
        "big file": "file_limit",
        "endless output": "output_limit",
        "setsid leftover": "ok",
        "leftovers": [],
    }
