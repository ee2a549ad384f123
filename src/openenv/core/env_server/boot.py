"""`python -m openenv.core.env_server.boot PKG.server.app [ARGS...]`: run an environment server
module exactly as `python -m PKG.server.app [ARGS...]` does, with the garbage collector off while
it imports (see `runner.defer_gc`); the app turns it back on as it starts serving.

The command of the images `openenv build` makes: a container's start waits for the server's
imports, so they should not pay for collector passes over objects that live for good.
"""

from __future__ import annotations

import runpy
import sys

from .runner import defer_gc


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0].startswith("-"):
        sys.exit("usage: python -m openenv.core.env_server.boot PKG.server.app [ARGS...]")
    module, rest = args[0], args[1:]
    defer_gc()
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
