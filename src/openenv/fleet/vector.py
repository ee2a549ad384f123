"""`VectorEnv`: a batch of fleet sessions reset and stepped in one call.

In the spirit of Gymnasium's vector API, with what remote environments need on top: every
slot's call runs concurrently, results come back in slot order, and a slot that fails
carries its error instead of failing the batch.

What happens to a failed slot depends on who is at fault:

- client or environment errors (an invalid action, the environment's code raising): the
  session stays as it is, the episode goes on;
- infrastructure errors (its server died, the connection was lost): the episode is over and
  must not be scored; the slot's next `reset()` (or autoreset step) releases the session and
  acquires a new one on a live server.

A slot whose episode ended (done) or failed must be reset before it is stepped again; with
`autoreset=True` the step after does it (Gymnasium's "next step" mode: that step's action is
ignored and its result is the new episode's first observation, with `autoreset=True`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from openenv.core.client_types import StepResult
from openenv.core.errors import is_infrastructure_error

from .errors import NeedsResetError

if TYPE_CHECKING:
    from .fleet import AnyClient, EnvFleet


@dataclass
class SlotResult:
    """One slot's outcome in a batch: a result, or the error that slot met."""

    index: int
    result: Optional[StepResult[Any]] = None
    error: Optional[BaseException] = None
    #: This step reset the slot instead of applying its action (autoreset).
    autoreset: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def infrastructure_failure(self) -> bool:
        """The episode failed outside the agent and the environment: drop it, never score it."""
        return self.error is not None and is_infrastructure_error(self.error)


class BatchResult(Sequence[SlotResult]):
    """The outcomes of one batched call, in slot order."""

    def __init__(self, slots: list[SlotResult]) -> None:
        self.slots = slots

    def __len__(self) -> int:
        return len(self.slots)

    def __iter__(self) -> Iterator[SlotResult]:
        return iter(self.slots)

    def __getitem__(self, index: Any) -> Any:
        return self.slots[index]

    @property
    def observations(self) -> list[Any]:
        return [s.result.observation if s.result else None for s in self.slots]

    @property
    def rewards(self) -> list[Optional[float]]:
        return [s.result.reward if s.result else None for s in self.slots]

    @property
    def dones(self) -> list[bool]:
        return [bool(s.result and s.result.done) for s in self.slots]

    @property
    def errors(self) -> list[Optional[BaseException]]:
        return [s.error for s in self.slots]

    @property
    def ok(self) -> list[bool]:
        return [s.ok for s in self.slots]

    def raise_first(self) -> BatchResult:
        """Raise the first slot's error, if any (for code that wants all-or-nothing)."""
        for slot in self.slots:
            if slot.error is not None:
                raise slot.error
        return self


@dataclass
class _Slot:
    client: Optional[AnyClient]
    #: An episode is running and may be stepped.
    running: bool = False
    #: The session is unusable (infrastructure failure): take a new one at the next reset.
    replace: bool = False


class VectorEnv:
    """`num_envs` sessions of one fleet; `await vec.reset()`, `await vec.step(actions)`."""

    def __init__(self, fleet: EnvFleet, clients: list[AnyClient], autoreset: bool) -> None:
        self.fleet = fleet
        self.autoreset = autoreset
        self._slots = [_Slot(client) for client in clients]
        self._closed = False

    @classmethod
    async def open(
        cls,
        fleet: EnvFleet,
        num_envs: int,
        *,
        autoreset: bool = False,
        timeout_s: Optional[float] = None,
    ) -> VectorEnv:
        """Acquire `num_envs` sessions; all or none (what was acquired is released)."""
        if num_envs < 1:
            raise ValueError("num_envs must be at least 1")
        got = await asyncio.gather(
            *(fleet.acquire(timeout_s) for _ in range(num_envs)), return_exceptions=True
        )
        clients = [c for c in got if not isinstance(c, BaseException)]
        failures = [c for c in got if isinstance(c, BaseException)]
        if failures:
            await asyncio.gather(*(fleet.release(c) for c in clients), return_exceptions=True)
            raise failures[0]
        return cls(fleet, clients, autoreset)

    @property
    def num_envs(self) -> int:
        return len(self._slots)

    @property
    def sessions(self) -> list[Optional[AnyClient]]:
        """The slots' current sessions (None where one could not be replaced yet)."""
        return [slot.client for slot in self._slots]

    async def reset(
        self,
        *,
        indices: Optional[Sequence[int]] = None,
        seed: int | Sequence[Optional[int]] | None = None,
        **kwargs: Any,
    ) -> BatchResult:
        """Start a new episode in every slot (or those in `indices`).

        `seed`: an int seeds slot i with seed + i (as Gymnasium does); a list gives each
        slot's seed. Other keyword arguments go to every slot's reset."""
        chosen = self._indices(indices)
        if seed is None or isinstance(seed, int):
            seeds: list[Optional[int]] = [None if seed is None else seed + i for i in chosen]
        else:
            if len(seed) != len(chosen):
                raise ValueError(f"{len(seed)} seeds for {len(chosen)} slots")
            seeds = list(seed)
        outcomes = await asyncio.gather(
            *(self._reset_slot(i, s, kwargs) for i, s in zip(chosen, seeds, strict=True))
        )
        return BatchResult(list(outcomes))

    async def step(
        self, actions: Sequence[Any], *, indices: Optional[Sequence[int]] = None, **kwargs: Any
    ) -> BatchResult:
        """Apply `actions[k]` to slot `indices[k]` (every slot, in order, by default)."""
        chosen = self._indices(indices)
        if len(actions) != len(chosen):
            raise ValueError(f"{len(actions)} actions for {len(chosen)} slots")
        outcomes = await asyncio.gather(
            *(self._step_slot(i, a, kwargs) for i, a in zip(chosen, actions, strict=True))
        )
        return BatchResult(list(outcomes))

    async def close(self) -> None:
        """Release every session back to the fleet (the servers keep running)."""
        if self._closed:
            return
        self._closed = True
        clients = [slot.client for slot in self._slots if slot.client is not None]
        for slot in self._slots:
            slot.client, slot.running = None, False
        await asyncio.gather(*(self.fleet.release(c) for c in clients), return_exceptions=True)

    async def __aenter__(self) -> VectorEnv:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- one slot ----------------------------------------------------------------------------

    def _indices(self, indices: Optional[Sequence[int]]) -> list[int]:
        if self._closed:
            raise RuntimeError("this VectorEnv is closed")
        if indices is None:
            return list(range(len(self._slots)))
        chosen = list(indices)
        for i in chosen:
            if not 0 <= i < len(self._slots):
                raise IndexError(f"slot {i} out of range (num_envs={len(self._slots)})")
        if len(set(chosen)) != len(chosen):
            raise ValueError("a slot appears twice in indices")
        return chosen

    async def _reset_slot(
        self, index: int, seed: Optional[int], kwargs: dict[str, Any]
    ) -> SlotResult:
        slot = self._slots[index]
        slot.running = False
        try:
            client = await self._usable_client(slot)
            options = dict(kwargs)
            if seed is not None:
                options["seed"] = seed
            result = await client._reset_async(**options)
        except Exception as exc:
            return SlotResult(index, error=await self._failed(slot, exc))
        slot.running = not result.done
        return SlotResult(index, result)

    async def _step_slot(self, index: int, action: Any, kwargs: dict[str, Any]) -> SlotResult:
        slot = self._slots[index]
        if not slot.running:
            if self.autoreset:
                outcome = await self._reset_slot(index, None, {})
                outcome.autoreset = True
                return outcome
            return SlotResult(
                index,
                error=NeedsResetError(
                    f"slot {index} has no running episode (it ended, failed or was never "
                    "reset): reset it first, or open the VectorEnv with autoreset=True"
                ),
            )
        assert slot.client is not None
        try:
            result = await slot.client._step_async(action, **kwargs)
        except Exception as exc:
            return SlotResult(index, error=await self._failed(slot, exc))
        slot.running = not result.done
        return SlotResult(index, result)

    async def _usable_client(self, slot: _Slot) -> AnyClient:
        """The slot's session, or a new one in place of a session that cannot continue."""
        if slot.client is not None and (slot.replace or self.fleet.is_lost(slot.client)):
            old, slot.client = slot.client, None
            await self.fleet.release(old)
        if slot.client is None:
            slot.client = await self.fleet.acquire()
            slot.replace = False
        return slot.client

    async def _failed(self, slot: _Slot, exc: BaseException) -> BaseException:
        if slot.client is None:
            return exc
        error = await self.fleet.session_error(slot.client, exc)
        if is_infrastructure_error(error):
            slot.running = False
            slot.replace = True
        return error
