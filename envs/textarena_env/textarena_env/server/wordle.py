"""A small, self-contained Wordle with TextArena's rules (no downloads): a seeded target from the
word list shipped in `textarena_env/data/words.txt`, green/yellow/gray feedback, 6 guesses.

TextArena's own `Wordle-v0` loads NLTK corpora that it downloads at run time, so this package
plays Wordle itself, with TextArena's conventions: the guess is the first word in square brackets
(`[crane]`; a message with no brackets at all is the guess itself), one invalid move is forgiven
and a second one in a row ends the game, and a lost game pays the share of letters the last guess
got right (greens, plus half the yellows)."""

from __future__ import annotations

import importlib.util
import random
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

WORD_LENGTH = 5
MAX_GUESSES = 6
GUESS_RE = re.compile(r"\[(\w+)\]")
#: hunspell dictionaries shipped inside the textarena package (read as files: no import, no
#: download)
HUNSPELL_FILES = ("en_US.dic", "en_GB.dic")


@lru_cache(maxsize=1)
def word_list() -> tuple[str, ...]:
    """The secret words: common five-letter words."""
    text = resources.files("textarena_env").joinpath("data/words.txt").read_text("utf-8")
    return tuple(sorted({w.strip().lower() for w in text.split() if w.strip()}))


@lru_cache(maxsize=1)
def dictionary() -> frozenset[str]:
    """The accepted guesses: the secret words, plus the five-letter words (and plurals of
    four-letter nouns) of the hunspell dictionaries that textarena ships, when it is installed."""
    words = set(word_list())
    spec = importlib.util.find_spec("textarena")
    if spec is None or not spec.submodule_search_locations:
        return frozenset(words)
    data = Path(next(iter(spec.submodule_search_locations))) / "envs" / "utils" / "data"
    for name in HUNSPELL_FILES:
        try:
            lines = (data / name).read_text("utf-8", errors="replace").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            word, _, flags = line.strip().partition("/")
            if not (word.isascii() and word.isalpha() and word.islower()):
                continue
            if len(word) == WORD_LENGTH:
                words.add(word)
            elif len(word) == WORD_LENGTH - 1 and "S" in flags:
                words.add(word + "s")
    return frozenset(words)


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
    """The first bracketed word of the message, lower-cased; a message with no brackets at all
    is taken whole (as TextArena's action formatting does). None when there is no word."""
    if "[" not in message and "]" not in message:
        message = f"[{message.strip()}]"
    found = GUESS_RE.search(message)
    return found.group(1).lower() if found else None


RULES = (
    "[GAME] You are Player 0. You are playing Wordle.\n"
    "Guess the secret {n}-letter English word in at most {max_guesses} tries. Write your guess "
    "in square brackets, e.g. [crane]. After each guess you get feedback per letter: "
    "G (green) = right letter in the right place, Y (yellow) = in the word but elsewhere, "
    "X (gray) = not in the word.\nEnter your first guess."
)


class Wordle:
    """One game. `check()` says why a guess is invalid; `guess()` plays a valid one."""

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
    def out_of_guesses(self) -> bool:
        return len(self.guesses) >= self.max_guesses

    @property
    def guesses_left(self) -> int:
        return self.max_guesses - len(self.guesses)

    def completion(self) -> float:
        """TextArena's partial credit: greens plus half the yellows of the last guess, over the
        word length (0 before any guess)."""
        if not self.guesses:
            return 0.0
        pattern = self.guesses[-1][1]
        return (pattern.count("G") + 0.5 * pattern.count("Y")) / WORD_LENGTH

    def check(self, message: str) -> str:
        """The guess in `message`, or ValueError saying why it is not a valid guess."""
        word = parse_guess(message)
        if word is None:
            raise ValueError(f"no guess in square brackets in {message!r}; write it like [crane]")
        if len(word) != WORD_LENGTH:
            raise ValueError(f"{word!r} is not a {WORD_LENGTH}-letter word")
        if any(word == w for w, _ in self.guesses):
            raise ValueError(f"{word!r} was already guessed; try another word")
        if self.strict and word not in dictionary():
            raise ValueError(f"{word!r} is not in the word list")
        return word

    def guess(self, message: str) -> str:
        word = self.check(message)
        pattern = feedback(word, self.target)
        self.guesses.append((word, pattern))
        return pattern

    def render_feedback(self) -> str:
        """The feedback message, in TextArena's layout (a `Feedback:` line, then the letters
        and their marks) so parsers written for TextArena's Wordle read it."""
        word, pattern = self.guesses[-1]
        return (
            f"You submitted [{word}].\nFeedback:\n{' '.join(word.upper())}\n{' '.join(pattern)}\n"
            f"You have {self.guesses_left} guesses left."
        )
