"""ASGI app of the Atari environment: `python -m atari_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import AtariAction, AtariObservation
from .atari_environment import AtariEnvironment, PooledAtariEnvironment
from .emulators import processes_setting

#: With ATARI_EMULATOR_PROCESSES the steps await the emulator processes on the event loop.
environment = PooledAtariEnvironment if processes_setting() else AtariEnvironment
app = create_app(environment, AtariAction, AtariObservation, env_name="atari_env")


def main(argv: list[str] | None = None) -> None:
    serve_main("atari_env.server.app:app", argv)


if __name__ == "__main__":
    main()
