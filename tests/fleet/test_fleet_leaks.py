"""A trainer holding a fleet ends without closing it: nothing of it may survive.

The trainer runs in a subprocess (as in tests/providers/leaks.py, whose helpers this reuses):
it starts a fleet, opens a vector of sessions and blocks. SIGTERM must stop every server on the
way out; after SIGKILL, one `openenv gc` must.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from openenv.providers.local import LocalProcessProvider
from tests.providers.leaks import REPO, kill_tagged, run_gc, tagged_processes, trainer_environ

from .test_fleet import wait_until

TRAINER = r"""
import asyncio, json, os
from openenv.fleet import EnvFleet

async def main():
    fleet = EnvFleet("echo", servers=2, sessions_per_server=2, health_interval_s=0.5)
    await fleet.start()
    vec = await fleet.vector(3)
    await vec.reset()
    print("READY " + json.dumps({"pid": os.getpid()}), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def owned_by(pid: int, state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("OPENENV_STATE_DIR", str(state_dir))
    return [
        r.id for r in LocalProcessProvider.resources() if r.owner is not None and r.owner.pid == pid
    ]


@pytest.mark.slow  # a trainer interpreter and two servers per case
@pytest.mark.parametrize("ending", ["sigterm", "sigkill"])
def test_a_trainer_that_dies_with_a_fleet_leaves_nothing(
    ending: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_dir = tmp_path / "state"
    tag = f"fleet-{ending}-{tmp_path.name}"
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER],
        cwd=REPO,
        env=trainer_environ(state_dir, tag),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert trainer.stdout is not None
        output = []
        for line in trainer.stdout:
            output.append(line)
            if line.startswith("READY "):
                break
        assert output and output[-1].startswith("READY "), "".join(output)
        pid = json.loads(output[-1][len("READY ") :])["pid"]
        assert len(tagged_processes(tag)) >= 2  # the servers (and their fork server)
        assert len(owned_by(pid, state_dir, monkeypatch)) == 2

        trainer.send_signal(signal.SIGTERM if ending == "sigterm" else signal.SIGKILL)
        trainer.communicate(timeout=60)
        if ending == "sigkill":
            gc = run_gc(state_dir)
            assert gc.returncode == 0, gc.stdout + gc.stderr
        assert wait_until(lambda: not tagged_processes(tag)), tagged_processes(tag)
        assert owned_by(pid, state_dir, monkeypatch) == []
    finally:
        kill_tagged(tag)
        if trainer.poll() is None:
            trainer.kill()
            trainer.communicate()
