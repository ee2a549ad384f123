"""Small rubrics and models shared by the rubric tests."""

from __future__ import annotations

import asyncio
from typing import Any

from openenv.core.env_server.types import Action, Observation
from openenv.core.rubrics import Rubric


class TextAction(Action):
    text: str = ""


class TextObservation(Observation):
    text: str = ""


ACTION = TextAction(text="hello")
OBS = TextObservation(text="world")


class Const(Rubric):
    """Scores a constant and counts its calls; optionally logs into a shared list."""

    def __init__(self, value: float, log: list[str] | None = None, name: str = "") -> None:
        super().__init__()
        self.value = value
        self.calls = 0
        self.log = log
        self.name = name

    def forward(self, action: Any, observation: Any) -> float:
        self.calls += 1
        if self.log is not None:
            self.log.append(f"forward:{self.name}")
        return self.value


class Rendezvous:
    """Lets `parties` coroutines go on only once all of them have arrived.

    Rubrics that meet here prove they ran at the same time, whatever the machine's load: run one
    after the other, the first waits for the rest in vain and fails after `timeout` seconds.
    """

    def __init__(self, parties: int, timeout: float = 30.0) -> None:
        self.parties = parties
        self.timeout = timeout
        self.arrived = 0
        self._all_here = asyncio.Event()

    async def arrive(self) -> None:
        self.arrived += 1
        if self.arrived >= self.parties:
            self._all_here.set()
        await asyncio.wait_for(self._all_here.wait(), self.timeout)


class AsyncConst(Rubric):
    """An async rubric that sleeps `delay` seconds (or meets the others at `meet`) first."""

    def __init__(
        self,
        value: float,
        delay: float = 0.0,
        log: list[str] | None = None,
        name: str = "",
        meet: Rendezvous | None = None,
    ) -> None:
        super().__init__()
        self.value = value
        self.delay = delay
        self.meet = meet
        self.calls = 0
        self.log = log
        self.name = name
        self.cancelled = False

    async def forward(self, action: Any, observation: Any) -> float:
        self.calls += 1
        if self.log is not None:
            self.log.append(f"start:{self.name}")
        try:
            if self.meet is not None:
                await self.meet.arrive()
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.log is not None:
            self.log.append(f"forward:{self.name}")
        return self.value


class Boom(Rubric):
    def __init__(self, exc: Exception | None = None) -> None:
        super().__init__()
        self.exc = exc or ValueError("boom")

    def forward(self, action: Any, observation: Any) -> float:
        raise self.exc


class AsyncBoom(Rubric):
    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay

    async def forward(self, action: Any, observation: Any) -> float:
        await asyncio.sleep(self.delay)
        raise RuntimeError("async boom")


def trace_hooks(rubric: Rubric, name: str, log: list[str]) -> None:
    """Log pre/post hook calls of `rubric` as pre:name / post:name=score."""

    def pre(r: Rubric, action: Any, observation: Any) -> None:
        log.append(f"pre:{name}")

    def post(r: Rubric, action: Any, observation: Any, score: float) -> None:
        assert r.last_score == score  # last_score is set before post-hooks run
        log.append(f"post:{name}={score:g}")

    rubric.register_forward_pre_hook(pre)
    rubric.register_forward_hook(post)
