"""`Sandbox.spawn(binds=...)`, `give_to_sandbox_user` and `clear_workspace(kill_processes=False)`:
what a long-lived kernel needs (a socket folder outside the workspace, kept across episodes)."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

from openenv.sandbox import Sandbox


def test_a_bound_folder_is_writable_at_its_own_path_and_processes_can_outlive_a_clear() -> None:
    with Sandbox() as box, tempfile.TemporaryDirectory() as shared:
        folder = Path(shared)
        box.give_to_sandbox_user(folder)
        box.write_file("old.txt", "episode 1")
        process = box.spawn(
            ["sh", "-c", f"echo hi > {folder}/from-inside; read line; echo $line"], binds=[folder]
        )
        try:
            box.clear_workspace(kill_processes=False)
            assert list(box.host_workspace.iterdir()) == []
            assert process.alive()
            process.stdin.write(b"still here\n")
            process.stdin.flush()
            assert process.stdout.readline() == b"still here\n"
        finally:
            process.kill()
        assert (folder / "from-inside").read_text() == "hi\n"


def test_a_spawned_process_outlives_the_thread_that_asked_for_it() -> None:
    with Sandbox() as box:
        started = []

        def start() -> None:
            process = box.spawn(["sh", "-c", "echo ready; exec sleep 30"])
            process.stdout.readline()  # running: any death signal is armed by now
            started.append(process)

        thread = threading.Thread(target=start)
        thread.start()
        thread.join()
        (process,) = started
        try:
            time.sleep(0.3)  # a death signal tied to the ended thread would have come by now
            assert process.alive()
        finally:
            process.kill()
