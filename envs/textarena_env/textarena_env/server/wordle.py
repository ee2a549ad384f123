"""A small, self-contained Wordle (no downloads): a seeded target from the word list shipped
in `textarena_env/data/words.txt`, standard green/yellow/gray feedback, 6 guesses.

TextArena's own `Wordle-v0` loads NLTK corpora that it downloads at run time, so this package
plays Wordle itself, with TextArena's conventions (the guess in square brackets, `[crane]`)."""

from __future__ import annotations

import random
import re
from functools import lru_cache
from importlib import resources

WORD_LENGTH = 5
MAX_GUESSES = 6
GUESS_RE = re.compile(r"\[\s*([A-Za-z]+)\s*\]")


@lru_cache(maxsize=1)
def word_list() -> tuple[str, ...]:
    text = resources.files("textarena_env").joinpath("data/words.txt").read_text("utf-8")
    return tuple(sorted({w.strip().lower() for w in text.split() if w.strip()}))


def feedback(guess: str, target: str) -> str:
    """One letter per position: G green (right place), Y yellow (elsewhere in the word),
    X gray (not in the word, or every copy of it is already accounted for)."""
    result = ["X"] * len(guess)
    remaining: dict[str, int] = {}
    for i, (g, t) in enumerate(zip(guess, target, strict=True)):
        if g == t:
            result[i] = "G"
        else:
            remaining[t] = remaining.get(t, 0) + 1
    for i, g in enumerate(guess):
        if result[i] != "G" and remaining.get(g, 0) > 0:
            result[i] = "Y"
            remaining[g] -= 1
    return "".join(result)


def parse_guess(message: str) -> str | None:
    """The last bracketed word of the message, lower-cased (None when there is none)."""
    found = GUESS_RE.findall(message)
    return found[-1].lower() if found else None


RULES = (
    "[GAME] You are Player 0. You are playing Wordle.\n"
    "Guess the secret {n}-letter English word in at most {max_guesses} tries. Write your guess "
    "in square brackets, e.g. [crane]. After each guess you get feedback per letter: "
    "G (green) = right letter in the right place, Y (yellow) = in the word but elsewhere, "
    "X (gray) = not in the word.\nEnter your first guess."
)


class Wordle:
    """One game. `guess()` returns the feedback pattern; invalid guesses raise ValueError."""

    def __init__(
        self, seed: int | None = None, max_guesses: int = MAX_GUESSES, strict: bool = True
    ) -> None:
        self.words = word_list()
        self.target = random.Random(seed).choice(self.words)
        self.max_guesses = max_guesses
        self.strict = strict
        self.guesses: list[tuple[str, str]] = []

    @property
    def rules(self) -> str:
        return RULES.format(n=WORD_LENGTH, max_guesses=self.max_guesses)

    @property
    def solved(self) -> bool:
        return bool(self.guesses) and self.guesses[-1][0] == self.target

    @property
    def over(self) -> bool:
        return self.solved or len(self.guesses) >= self.max_guesses

    @property
    def guesses_left(self) -> int:
        return self.max_guesses - len(self.guesses)

    def check(self, message: str) -> str:
        """The guess in `message`, or ValueError saying why it is not a valid guess."""
        word = parse_guess(message)
        if word is None:
            raise ValueError(f"no guess in square brackets in {message!r}; write it like [crane]")
        if len(word) != WORD_LENGTH:
            raise ValueError(f"{word!r} is not a {WORD_LENGTH}-letter word")
        if self.strict and word not in self.words:
            raise ValueError(f"{word!r} is not in the word list")
        return word

    def guess(self, message: str) -> str:
        if self.over:
            raise ValueError("the game is over")
        word = self.check(message)
        pattern = feedback(word, self.target)
        self.guesses.append((word, pattern))
        return pattern

    def render_feedback(self) -> str:
        word, pattern = self.guesses[-1]
        lines = [
            f"[GAME] You submitted [{word}].",
            " ".join(word.upper()),
            " ".join(pattern),
        ]
        if self.solved:
            lines.append(f"Congratulations! You guessed the word {word!r}.")
        elif self.over:
            lines.append(f"You ran out of guesses. The word was {self.target!r}.")
        else:
            lines.append(f"You have {self.guesses_left} guesses left.")
        return "\n".join(lines)
