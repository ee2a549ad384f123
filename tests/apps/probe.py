"""A probe environment for provider tests: each step runs a Python snippet in the server.

`ProbeAction(code=...)` executes `code` in the environment's process with `os`, `socket`,
`subprocess` and `sys` in scope; whatever it assigns to `result` comes back (as a string) in
`ProbeObservation.output`, and an exception comes back as `error`. Tests use it to look at an
environment from the inside: its variables, its limits, what it can read, write and reach.
Only for tests: it runs whatever it is sent.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_app


class ProbeAction(Action):
    code: str


class ProbeObservation(Observation):
    output: str = ""
    error: str = ""


class ProbeEnv(Environment[ProbeAction, ProbeObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any) -> Any:
        self._state = State(episode_id=episode_id)
        return ProbeObservation(output=str(os.getpid()), reward=0.0, done=False)

    def step(self, action: ProbeAction, **kwargs: Any) -> ProbeObservation:
        scope: dict[str, Any] = {"os": os, "socket": socket, "subprocess": subprocess, "sys": sys}
        try:
            exec(action.code, scope)
        except BaseException as exc:  # the probe reports everything, even SystemExit
            return ProbeObservation(error=f"{type(exc).__name__}: {exc}", reward=0.0)
        return ProbeObservation(output=str(scope.get("result", "")), reward=1.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(ProbeEnv, ProbeAction, ProbeObservation, env_name="probe")
