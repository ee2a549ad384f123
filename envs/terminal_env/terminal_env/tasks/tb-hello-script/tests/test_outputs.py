"""Checks in pytest's style (test_* functions); the runner below prints pytest's -rA lines."""

import os
import subprocess
import sys


def test_hello_prints_greeting():
    out = subprocess.run([sys.executable, "hello.py"], capture_output=True, text=True, timeout=20)
    assert out.stdout.strip() == "Hello, world!"


def test_greet_is_executable():
    # Mode bits, not os.access: the workspace may be on a noexec mount.
    assert os.stat("greet.sh").st_mode & 0o111 == 0o111


def test_greet_runs_hello():
    out = subprocess.run(["bash", "greet.sh"], capture_output=True, text=True, timeout=20)
    assert out.stdout.strip() == "Hello, world!"


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
