"""Servers for the conformance tests.

Every configuration the suite needs runs in its own uvicorn server, in this process (each app
reads its settings when it is built). They are all started the first time any of them is
requested and shared by the whole session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.pycache import PYCACHE_ENV
from tests.support.server import RunningServer, serve

# Long enough for the resume tests to reconnect, short enough to test expiry quickly.
RESUME_GRACE_S = 1.0
# Small enough that the size tests send little data.
MAX_MESSAGE_BYTES = 16384
# Idle timeout of the reaper server.
SESSION_TIMEOUT_S = 1.0
# How long a step of the slow env sleeps by default.
SLOW_MS = 300
# Bytes of replies the replay server keeps per session.
REPLAY_BYTES = 65536

#: name -> (app import string, environment). `{marker}` is replaced by that server's marker file.
SERVER_SPECS: dict[str, tuple[str, dict[str, str]]] = {
    # The typed counter env with generous capacity; shared by most tests.
    "counter": (
        "apps.counter:app",
        {
            "MAX_CONCURRENT_ENVS": "64",
            "OPENENV_RESUME_GRACE": str(RESUME_GRACE_S),
            "OPENENV_MAX_MESSAGE_BYTES": str(MAX_MESSAGE_BYTES),
            "OPENENV_SESSION_TIMEOUT": "",
            "OPENENV_TEST_CLOSE_MARKER": "{marker}",
        },
    ),
    "two_slot": (
        "apps.counter:app",
        {"MAX_CONCURRENT_ENVS": "2", "OPENENV_QUEUE_TIMEOUT": "20", "OPENENV_MAX_QUEUED": ""},
    ),
    "short_queue": (
        "apps.counter:app",
        {"MAX_CONCURRENT_ENVS": "1", "OPENENV_QUEUE_TIMEOUT": "0.5", "OPENENV_MAX_QUEUED": ""},
    ),
    "no_queue": (
        "apps.counter:app",
        {"MAX_CONCURRENT_ENVS": "1", "OPENENV_MAX_QUEUED": "0", "OPENENV_QUEUE_TIMEOUT": ""},
    ),
    "reaper": (
        "apps.counter:app",
        {
            "MAX_CONCURRENT_ENVS": "1",
            "OPENENV_SESSION_TIMEOUT": str(SESSION_TIMEOUT_S),
            "OPENENV_QUEUE_TIMEOUT": "20",
            "OPENENV_TEST_CLOSE_MARKER": "{marker}",
        },
    ),
    "slow": (
        "apps.slow:app",
        {"SLOW_STEP_MS": str(SLOW_MS), "MAX_CONCURRENT_ENVS": "128", "OPENENV_RESUME_GRACE": "10"},
    ),
    # Observations with bytes, for binary frames (a grace no loaded machine outlasts).
    "frames": ("apps.frames:app", {"MAX_CONCURRENT_ENVS": "8", "OPENENV_RESUME_GRACE": "10"}),
    "broken_factory": ("apps.broken_factory:app", {"MAX_CONCURRENT_ENVS": "1"}),
    "broken_reset": ("apps.broken_reset:app", {"MAX_CONCURRENT_ENVS": "4"}),
    "echo": ("echo_env.server.app:app", {"MAX_CONCURRENT_ENVS": "8"}),
    # An env that is not concurrency-safe and counts its live instances (stateless capacity).
    "limits": (
        "apps.limits:app",
        {"MAX_CONCURRENT_ENVS": "1", "OPENENV_QUEUE_TIMEOUT": "120", "OPENENV_MAX_QUEUED": ""},
    ),
    # The same env with a small replay budget (REPLAY_BYTES) for the replay cache tests.
    "replay": (
        "apps.limits:app",
        {
            "MAX_CONCURRENT_ENVS": "1",
            "OPENENV_REPLAY_BYTES": str(REPLAY_BYTES),
            "OPENENV_RESUME_GRACE": "60",
            "OPENENV_QUEUE_TIMEOUT": "60",
        },
    ),
}


def server_env(env: dict[str, str]) -> dict[str, str]:
    return {**PYCACHE_ENV, **env}


def closed_episodes(marker: Path) -> list[str]:
    """Episode ids the counter env wrote on close(), one per close."""
    return marker.read_text(encoding="utf-8").split()


class Servers:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.running: dict[str, RunningServer] = {}
        self.markers: dict[str, Path] = {}
        self.stack = contextlib.ExitStack()

    def marker(self, name: str) -> Path:
        path = self.markers.get(name)
        if path is None:
            path = self.root / f"{name}-closed.txt"
            path.touch()
            self.markers[name] = path
        return path

    def env(self, name: str) -> dict[str, str]:
        _, env = SERVER_SPECS[name]
        return server_env(
            {k: v.replace("{marker}", str(self.marker(name))) for k, v in env.items()}
        )

    def _start(self, name: str) -> tuple[contextlib.AbstractContextManager, RunningServer]:
        app, _ = SERVER_SPECS[name]
        cm = serve(app, env=self.env(name), in_process=True)  # settings are read at build
        return cm, cm.__enter__()

    def start(self, names: list[str]) -> None:
        """Start these servers, in parallel once the first has filled the bytecode cache."""
        names = [n for n in names if n not in self.running]
        if not names:
            return
        errors: list[BaseException] = []
        with ThreadPoolExecutor(4) as pool:
            futures = {names[0]: pool.submit(self._start, names[0])}
            with contextlib.suppress(Exception):
                futures[names[0]].result()
            futures.update({name: pool.submit(self._start, name) for name in names[1:]})
            for name, future in futures.items():
                try:
                    cm, server = future.result()
                except Exception as exc:
                    errors.append(exc)
                    continue
                self.stack.push(cm.__exit__)
                self.running[name] = server
        if errors:
            raise errors[0]

    def get(self, name: str) -> RunningServer:
        if name not in self.running:
            self.start([name])
        return self.running[name]


def _needed_servers(session: pytest.Session) -> list[str]:
    """Servers the collected tests ask for (`<name>_server` / `<name>_marker` fixtures)."""
    wanted: set[str] = set()
    for item in session.items:
        for fixture in getattr(item, "fixturenames", ()):
            base = fixture.rsplit("_", 1)[0]
            if fixture.endswith(("_server", "_marker")) and base in SERVER_SPECS:
                wanted.add(base)
            elif fixture == "close_marker":
                wanted.add("counter")
    return [name for name in SERVER_SPECS if name in wanted]


@pytest.fixture(scope="session")
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Servers]:
    pool = Servers(tmp_path_factory.mktemp("servers"))
    with pool.stack:
        pool.start(_needed_servers(request.session))
        yield pool


@pytest.fixture(scope="session")
def counter_server(servers: Servers) -> RunningServer:
    return servers.get("counter")


@pytest.fixture(scope="session")
def close_marker(servers: Servers) -> Path:
    """File the counter server's envs append their episode id to on close()."""
    return servers.marker("counter")


@pytest.fixture(scope="session")
def two_slot_server(servers: Servers) -> RunningServer:
    return servers.get("two_slot")


@pytest.fixture(scope="session")
def short_queue_server(servers: Servers) -> RunningServer:
    return servers.get("short_queue")


@pytest.fixture(scope="session")
def no_queue_server(servers: Servers) -> RunningServer:
    return servers.get("no_queue")


@pytest.fixture(scope="session")
def reaper_server(servers: Servers) -> RunningServer:
    return servers.get("reaper")


@pytest.fixture(scope="session")
def reaper_marker(servers: Servers) -> Path:
    return servers.marker("reaper")


@pytest.fixture(scope="session")
def slow_server(servers: Servers) -> RunningServer:
    return servers.get("slow")


@pytest.fixture(scope="session")
def frames_server(servers: Servers) -> RunningServer:
    return servers.get("frames")


@pytest.fixture(scope="session")
def broken_factory_server(servers: Servers) -> RunningServer:
    return servers.get("broken_factory")


@pytest.fixture(scope="session")
def broken_reset_server(servers: Servers) -> RunningServer:
    return servers.get("broken_reset")


@pytest.fixture(scope="session")
def echo_server(servers: Servers) -> RunningServer:
    return servers.get("echo")


@pytest.fixture(scope="session")
def limits_server(servers: Servers) -> RunningServer:
    return servers.get("limits")


@pytest.fixture(scope="session")
def replay_server(servers: Servers) -> RunningServer:
    return servers.get("replay")
