"""The process backend as an unprivileged server without a cgroup (as in a container): limits
by rlimits, RLIMIT_NPROC included, which binds only a non-root user. When the tests run as root,
a child interpreter runs as an otherwise unused uid to see it; as any other user, the
`process-rlimits` cases of test_adversarial.py already do."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import openenv
from openenv.sandbox import SandboxLimits

from .conftest import survivors

pytestmark = pytest.mark.timeout(300)

UID = 10731  # no account: nothing else on the machine counts against its RLIMIT_NPROC

SCRIPT = r"""
import json, os, sys
from openenv.isolation import cgroups
from openenv.sandbox import Sandbox, SandboxLimits
assert os.geteuid() != 0 and cgroups.mode() is None, "expected an unprivileged user, no cgroup"
box = Sandbox(backend="process", limits=SandboxLimits.model_validate_json(sys.argv[1]))
token = sys.argv[2]
results = {
    "fork bomb": box.run([box.python, "-c", "import os\nwhile True: os.fork()"]),
    "memory hog": box.run([box.python, "-c", "a = []\nwhile True: a.append(bytearray(10**7))"]),
    "cpu spin": box.run([box.python, "-c", "while True: pass"]),
    "setsid leftover": box.run(["sh", "-c", f"setsid sleep {token} & echo started"]),
    "still works": box.run([box.python, "-c", "print('fine')"]),
}
box.close()
print(json.dumps({name: r.status.value for name, r in results.items()}))
"""


def interpreter_for_another_user() -> str:
    """An interpreter of this Python version that a uid without a home can run, and that can
    start itself again (as the sandbox does): a system one, not a venv under /root."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    system = [
        shutil.which(f"python{version}", path=folder) for folder in ("/usr/local/bin", "/usr/bin")
    ]
    for candidate in (*system, sys.executable):
        if not candidate:
            continue
        check = "import subprocess, sys; subprocess.run([sys.executable, '-c', ''], check=True)"
        as_other = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]
        if subprocess.run([*as_other, candidate, "-c", check], capture_output=True).returncode == 0:
            return candidate
    pytest.skip(f"no Python {version} that uid {UID} can run")


def test_rlimits_contain_an_unprivileged_servers_commands() -> None:
    if os.geteuid() != 0:
        pytest.skip("not root: the process-rlimits cases of test_adversarial.py cover this user")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    python = interpreter_for_another_user()
    source = str(Path(openenv.__file__).resolve().parents[1])
    pythonpath = os.pathsep.join([source, sysconfig.get_paths()["purelib"]])
    token = f"1000.{int.from_bytes(os.urandom(4), 'big')}"
    limits = SandboxLimits(wall_time_s=60, memory_mb=128, max_processes=24, cpu_time_s=1)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": pythonpath, "TMPDIR": "/tmp"}
    drop = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]
    probe = subprocess.run(
        [*drop, python, "-c", "import openenv.sandbox"], capture_output=True, env=env, cwd="/"
    )
    if probe.returncode != 0:
        pytest.skip("this checkout or its interpreter is not readable by an unprivileged user")
    run = subprocess.run(
        [
            "setpriv",
            f"--reuid={UID}",
            f"--regid={UID}",
            "--clear-groups",
            python,
            "-c",
            SCRIPT,
            limits.model_dump_json(),
            token,
        ],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": pythonpath, "TMPDIR": "/tmp"},
        cwd="/",
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[-1]) == {
        "fork bomb": "process_limit",
        "memory hog": "memory_limit",
        "cpu spin": "cpu_limit",
        "setsid leftover": "ok",
        "still works": "ok",
    }
    assert survivors(token) == [], "the setsid escaper survived"
