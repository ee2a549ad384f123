"""A step runs `action.command` with /bin/sh and returns its exit code and output.

Only for the sandbox provider's tests: it lets a test probe, from inside a sandbox, what an
environment can read, write, reach and kill. Never serve it outside a sandbox.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_app


def _try_to_unlock() -> dict[str, str]:
    """At import (in the sandbox's fork server, which holds capabilities in its namespace):
    try to make this read-only folder writable and to unmount it. Both must fail."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    # The environment's folder: the sandbox binds it read-only (a mount point).
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__))).encode()
    results = {}
    ms_rdonly, ms_remount, ms_bind = 1, 32, 4096
    if libc.mount(b"none", here, None, ctypes.c_ulong(ms_remount | ms_bind), None) == 0:
        results["remount_rw"] = "succeeded"
        libc.mount(b"none", here, None, ctypes.c_ulong(ms_remount | ms_bind | ms_rdonly), None)
    else:
        results["remount_rw"] = os.strerror(ctypes.get_errno())
    if libc.umount2(here, 2) == 0:  # MNT_DETACH
        results["umount"] = "succeeded"
    else:
        results["umount"] = os.strerror(ctypes.get_errno())
    return results


#: What the import-time attempt above achieved (read by `reset`).
IMPORT_PROBE = _try_to_unlock()


class ShellAction(Action):
    command: str
    timeout_s: float = 20.0
    #: Leave the command running after the step returns (a background process).
    detach: bool = False


class ShellObservation(Observation):
    exit_code: int = 0
    output: str = ""


class ShellEnvironment(Environment[ShellAction, ShellObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kw: Any
    ) -> ShellObservation:
        self._state = State(episode_id=episode_id)
        return ShellObservation(
            output=f"pid {os.getpid()} uid {os.getuid()}", metadata={"import_probe": IMPORT_PROBE}
        )

    def step(
        self, action: ShellAction, timeout_s: float | None = None, **kw: Any
    ) -> ShellObservation:
        if action.detach:
            subprocess.Popen(
                ["/bin/sh", "-c", action.command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            return ShellObservation(output="detached")
        process = subprocess.Popen(
            ["/bin/sh", "-c", action.command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=action.timeout_s)
            code = process.returncode
        except subprocess.TimeoutExpired:
            for _ in range(50):  # a fork bomb keeps forking: kill its group until it is empty
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    break
            output, _ = process.communicate()
            code = -9
        return ShellObservation(exit_code=code, output=output.decode(errors="replace")[-4000:])

    @property
    def state(self) -> State:
        return self._state


app = create_app(ShellEnvironment, ShellAction, ShellObservation, env_name="sandbox_probe")
