"""Helpers for a task's verify.py (the Python twin of check.sh)::

    import os, sys
    sys.path.insert(0, os.environ["OPENENV_VERIFY_LIB"])
    from check import Checks

    checks = Checks()                      # reads the secret token from stdin
    checks.check("report exists", os.path.isfile("report.txt"))
    checks.finish()                        # exit 0 when every check passed, else 1
                                           # (finish(partial=True): the fraction passed)

Only lines starting with the token count, so nothing the agent left in the workspace can print
a passing verdict.
"""

from __future__ import annotations

import sys


class Checks:
    def __init__(self) -> None:
        self._token = sys.stdin.readline().strip()
        self.results: list[bool] = []

    def check(self, name: str, passed: object) -> bool:
        """Report one check; `passed` is anything truthy. Returns it as a bool."""
        ok = bool(passed)
        print(f"{self._token} check {'pass' if ok else 'fail'} {name}", flush=True)
        self.results.append(ok)
        return ok

    def score(self, value: float) -> None:
        print(f"{self._token} score {value}", flush=True)

    def finish(self, partial: bool = False) -> None:
        if partial and self.results:
            self.score(sum(self.results) / len(self.results))
        sys.exit(0 if all(self.results) else 1)
