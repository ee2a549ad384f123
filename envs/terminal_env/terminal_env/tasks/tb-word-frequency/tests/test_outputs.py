"""The expected answer is computed here from book.txt's original text, not from the workspace."""

import re
import sys
from collections import Counter

ORIGINAL = """The cat sat on the mat. The dog sat on the log!
A cat and a dog: the best of friends? The cat thinks so.
On Monday the dog ran; on Tuesday the cat ran. Cat, cat, CAT.
"""


def expected():
    counts = Counter(re.findall(r"[a-z]+", ORIGINAL.lower()))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:5]
    return [f"{word},{count}" for word, count in ranked]


def test_freq_file_exists():
    with open("freq.txt") as handle:
        assert handle.read().strip()


def test_top_words():
    with open("freq.txt") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    assert lines == expected()


if __name__ == "__main__":
    failed = 0
    for name, test in sorted(globals().items()):
        if name.startswith("test_") and callable(test):
            try:
                test()
                print(f"PASSED test_outputs.py::{name}")
            except Exception as exc:
                failed += 1
                print(f"FAILED test_outputs.py::{name} - {exc!r}")
    sys.exit(1 if failed else 0)
