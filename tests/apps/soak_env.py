"""The environment the soak and chaos suite drives (`openenv.testing.soak`).

Every applied step appends its `tag` to the state, so the driver can compare what the server
applied with what its clients saw acknowledged (no lost or doubled step after a resume). A step
may ask for a reply padded to `pad` characters (slow readers), block on the named gate `hold`
(hung calls) until a step with `release` of that name opens it, or `hold_limit_s` passes (a
bound that only a broken driver reaches: it releases every gate it holds).
"""

from __future__ import annotations

import threading
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Environment, create_app
from openenv.testing.soak import SoakAction, SoakObservation, SoakState, add_heap_route

_lock = threading.Lock()
_gates: dict[str, threading.Event] = {}


def _gate(name: str) -> threading.Event:
    with _lock:
        return _gates.setdefault(name, threading.Event())


class SoakEnv(Environment[SoakAction, SoakObservation, SoakState]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = SoakState(episode_id=str(uuid4()))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> SoakObservation:
        self._state = SoakState(episode_id=episode_id or str(uuid4()))
        return SoakObservation()

    def step(
        self, action: SoakAction, timeout_s: float | None = None, **kwargs: Any
    ) -> SoakObservation:
        if action.release:
            _gate(action.release).set()
        if action.hold:
            _gate(action.hold).wait(action.hold_limit_s)
            with _lock:
                _gates.pop(action.hold, None)
        state = self._state
        state.tags = [*state.tags, action.tag]
        state.step_count += 1
        return SoakObservation(tag=action.tag, applied=state.step_count, pad="x" * action.pad)

    @property
    def state(self) -> SoakState:
        return self._state


app = create_app(SoakEnv, SoakAction, SoakObservation, env_name="soak_env")
add_heap_route(app)
