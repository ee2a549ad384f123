"""`SandboxProcess.ended()`: a long-lived process's end, classified like `Sandbox.run`."""

from __future__ import annotations

import time

from openenv.sandbox import ExecStatus, Sandbox


def test_a_spawned_process_that_exits_reports_its_code() -> None:
    with Sandbox() as box:
        child = box.spawn([box.python, "-c", "import sys; sys.exit(3)"])
        result = child.ended()
        assert (result.status, result.exit_code) == (ExecStatus.ERROR, 3)
        assert not child.alive()


def test_a_spawned_process_past_its_deadline_is_a_timeout() -> None:
    with Sandbox() as box:
        child = box.spawn([box.python, "-c", "import time; time.sleep(60)"])
        time.sleep(0.1)
        result = child.ended(timed_out=True)
        assert result.status is ExecStatus.TIMEOUT
        assert result.backend == box.backend
        assert not child.alive()


def test_clearing_the_workspace_can_keep_a_spawned_process() -> None:
    with Sandbox() as box:
        box.write_file("old.txt", "x")
        spare = box.spawn([box.python, "-c", "import time; time.sleep(60)"])
        other = box.spawn([box.python, "-c", "import time; time.sleep(60)"])
        box.clear_workspace(keep=[spare])
        assert not box.host_path("old.txt").exists()
        other.process.wait(timeout=10)
        assert spare.alive() and not other.alive()
