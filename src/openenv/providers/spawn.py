"""Moved to `openenv.isolation.spawn` (OS isolation, shared with `openenv.sandbox`).

This name stays for code that imports it: it is the same module object, so attributes set on
it (in tests, say) reach the code that uses it.
"""

from __future__ import annotations

import sys

from openenv.isolation import spawn as _module

sys.modules[__name__] = _module
