"""The soak suite's server: tests/apps/soak_env.py in its own process, with short timeouts."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from openenv.testing.soak import SoakConfig, SoakLimits
from tests.support.server import RunningServer, serve

APP = "tests.apps.soak_env:app"

#: Settings of the soak server. The step deadline answers hung calls held longer than 5 s with
#: TIMEOUT once the server has deadlines (the driver holds them 1-8 s, then releases them); a
#: short resume grace lets abandoned sessions end within a cycle (10 s: on a loaded machine a
#: cut client's reconnect alone took more than 3 s, and its session was gone); 16 threads at most
#: bound the thread count; frames above 256 KiB are refused (oversized frames stay cheap).
#: A fixed mmap threshold: glibc otherwise raises it after large blocks (the slow readers'
#: 256 KiB replies) are freed, and later ones fragment the heap, so RSS after a cycle swings by
#: +/-40% with no object kept (measured); with it RSS tracks what the server really holds.
SOAK_SERVER_ENV = {
    "MALLOC_MMAP_THRESHOLD_": "131072",
    "OPENENV_RESUME_GRACE": "10",
    "OPENENV_SESSION_TIMEOUT": "120",
    "OPENENV_MAX_MESSAGE_BYTES": str(256 * 1024),
    "OPENENV_MAX_THREADS": "16",
    "OPENENV_STEP_TIMEOUT": "5",
    "OPENENV_CALL_TIMEOUT": "30",
}


def soak_config(**overrides: object) -> SoakConfig:
    """A driver config that matches SOAK_SERVER_ENV."""
    config = SoakConfig(resume_grace_s=float(SOAK_SERVER_ENV["OPENENV_RESUME_GRACE"]))
    for name, value in overrides.items():
        setattr(config, name, value)
    return config


def soak_limits() -> SoakLimits:
    """The driver's bounds for a server run with SOAK_SERVER_ENV (its full worker pool)."""
    return SoakLimits(pool_threads=int(SOAK_SERVER_ENV["OPENENV_MAX_THREADS"]))


@contextlib.contextmanager
def soak_server(
    extra_env: dict[str, str] | None = None, drop: tuple[str, ...] = ()
) -> Iterator[RunningServer]:
    """The soak app in its own process with SOAK_SERVER_ENV (+ `extra_env`, - `drop`)."""
    env = {k: v for k, v in {**SOAK_SERVER_ENV, **(extra_env or {})}.items() if k not in drop}
    with serve(APP, env=env, in_process=False) as server:
        yield server
