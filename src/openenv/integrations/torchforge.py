"""torchforge: a served environment in the shape torchforge's rollout loops use.

torchforge has no environment base class: its apps (e.g. `apps/blackjack`) give the rollout
loop an object with `reset() -> str` (the first user message), `step(action_text) ->
EnvStepResult` (`observation` as a `{"role": "user", "content": ...}` message, `reward`,
`done`, `metadata`) and `close()`, and the loop asks the policy (`Generator`, whose
`generate.route(prompt)` answers with `Completion`s carrying `.text`) for each reply.
`ForgeTextEnv` is that object over one `TextEpisode` per `reset()`, and `play_episode` is the
loop, for any async `generate(messages)` that returns text or a `Completion`.

Rewards are the environment's; an environment failure raises
`EnvironmentInfrastructureError`, so the episode is dropped rather than scored 0. Nothing of
torchforge is imported: the interface is duck-typed (PyPI's `torchforge` 0.0.1 is an empty
placeholder; the real one needs Monarch and vLLM on GPUs).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ._episodes import EnvironmentInfrastructureError, ServedEnv, TextEpisode

__all__ = [
    "EnvStepResult",
    "EnvironmentInfrastructureError",
    "ForgeEpisode",
    "ForgeTextEnv",
    "ServedEnv",
    "play_episode",
]


@dataclass
class EnvStepResult:
    """The step result torchforge's rollout loops read (field names as in its apps)."""

    observation: dict[str, str]
    reward: float
    done: bool
    metadata: dict[str, Any] = field(default_factory=dict)


class ForgeTextEnv:
    """`reset()`/`step(text)`/`close()` over a served environment; each `reset()` starts a new
    episode (a new session), closing the previous one."""

    def __init__(
        self,
        served: ServedEnv | str,
        *,
        seed: int | None = None,
        task: Any = None,
    ) -> None:
        self._owns_served = isinstance(served, str)
        self.served = ServedEnv(served) if isinstance(served, str) else served
        self.seed = seed
        self.task = task
        self._episode: TextEpisode | None = None

    @property
    def episode(self) -> TextEpisode:
        if self._episode is None:
            raise RuntimeError("call reset() first")
        return self._episode

    def reset(self, seed: int | None = None) -> str:
        """Start an episode; the first user message's text."""
        self._close_episode()
        self._episode = self.served.episode(
            task=self.task, seed=self.seed if seed is None else seed
        )
        return self._episode.initial_text()

    def step(self, action_text: str) -> EnvStepResult:
        step = self.episode.step_text(action_text)
        content = "" if step.done else step.observation
        return EnvStepResult(
            observation={"role": "user", "content": content},
            reward=step.reward,
            done=step.done,
            metadata={**step.metadata, "turn_count": self.episode.steps},
        )

    def _close_episode(self) -> None:
        episode, self._episode = self._episode, None
        if episode is not None:
            episode.close()

    def close(self) -> None:
        self._close_episode()
        if self._owns_served:
            self.served.close()


@dataclass
class ForgeEpisode:
    """One played episode: the conversation, each reply's completion and reward."""

    messages: list[dict[str, str]]
    completions: list[Any]
    rewards: list[float]
    done: bool

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))


Generate = Callable[[list[dict[str, str]]], Awaitable[Any]]


def _reply_text(completion: Any) -> str:
    """A reply's text: a string, a `Completion` (`.text`), or the first of a list of them
    (what `Generator.generate.route` returns)."""
    if isinstance(completion, list):
        if not completion:
            raise ValueError("the policy returned no completion")
        completion = completion[0]
    if isinstance(completion, str):
        return completion
    text = getattr(completion, "text", None)
    if not isinstance(text, str):
        raise TypeError(f"cannot read a reply's text from {type(completion).__name__}")
    return text


async def play_episode(
    env: ForgeTextEnv,
    generate: Generate,
    *,
    max_turns: int = 10,
    seed: int | None = None,
) -> ForgeEpisode:
    """Play one episode: reset, then ask `generate` for each reply until done or `max_turns`.
    The environment's blocking calls run off the event loop (torchforge's loops are async)."""
    import asyncio

    first = await asyncio.to_thread(env.reset, seed)
    messages = [{"role": "user", "content": first}]
    completions: list[Any] = []
    rewards: list[float] = []
    done = False
    for _ in range(max_turns):
        completion = generate(list(messages))
        if inspect.isawaitable(completion):
            completion = await completion
        text = _reply_text(completion)
        completions.append(completion)
        messages.append({"role": "assistant", "content": text})
        result = await asyncio.to_thread(env.step, text)
        rewards.append(result.reward)
        done = result.done
        if done:
            break
        messages.append(result.observation)
    return ForgeEpisode(messages=messages, completions=completions, rewards=rewards, done=done)
