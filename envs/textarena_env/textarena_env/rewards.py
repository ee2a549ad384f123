"""Client-side Wordle reward signals, under the names OpenEnv's `textarena_env` exports
(`RewardProvider`, `build_reward_providers`).

The server already sends the same four signals in `observation.info["reward_signals"]`; these
providers recompute them from an action and the observation that answered it, for trainer
code written against OpenEnv's package."""

from __future__ import annotations

import re
from typing import Protocol

from .models import TextArenaAction, TextArenaObservation

_BRACKETED = re.compile(r"\[[A-Za-z]{5}\]")
_MARKS = re.compile(r"^[GYX](?: ?[GYX]){4}$")


class RewardProvider(Protocol):
    """Auxiliary reward signals for one episode: `reset()` between episodes, `compute()` after
    every step."""

    def reset(self) -> None: ...

    def compute(
        self, *, action: TextArenaAction, observation: TextArenaObservation
    ) -> dict[str, float]: ...


def build_reward_providers(env_id: str) -> list[RewardProvider]:
    """The providers for a game: Wordle's signals for `Wordle-v0`, none otherwise."""
    return [WordleSignals()] if env_id == "Wordle-v0" else []


def latest_marks(observation: TextArenaObservation) -> str:
    """The G/Y/X marks of the latest `Feedback:` block in the observation's messages."""
    for message in reversed(observation.messages):
        if "Feedback:" not in message.content:
            continue
        block = message.content.rsplit("Feedback:", 1)[1]
        for line in reversed(block.strip().splitlines()):
            if _MARKS.match(line.strip()):
                return line.replace(" ", "").strip()
    return ""


class WordleSignals:
    """`wordle.greens` / `wordle.yellows`: share of the letters marked G / Y in the latest
    feedback; `wordle.repetitions`: 1 minus the earlier uses of this guess in the episode;
    `wordle.correct`: the step's reward."""

    def __init__(self) -> None:
        self._uses: dict[str, int] = {}

    def reset(self) -> None:
        self._uses.clear()

    def compute(
        self, *, action: TextArenaAction, observation: TextArenaObservation
    ) -> dict[str, float]:
        found = _BRACKETED.search(action.message)
        letters = re.sub(r"[^a-z]", "", action.message.lower())
        guess = found.group(0).lower() if found else (letters[:5] if len(letters) >= 5 else "")
        before = self._uses.get(guess, 0) if guess else 0
        if guess:
            self._uses[guess] = before + 1
        marks = latest_marks(observation)
        return {
            "wordle.greens": marks.count("G") / 5,
            "wordle.yellows": marks.count("Y") / 5,
            "wordle.repetitions": 1.0 - before,
            "wordle.correct": float(observation.reward or 0.0),
        }
