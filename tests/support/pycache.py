"""Where test subprocesses cache their bytecode (stdlib only: the root conftest imports it)."""

from __future__ import annotations

import tempfile
from pathlib import Path

#: The machine may set PYTHONDONTWRITEBYTECODE, which would make every server and CLI
#: subprocess compile fastapi, pydantic, fastmcp... from source at start-up (about half of its
#: start-up CPU). The cache lives outside the tree.
PYCACHE_ENV = {
    "PYTHONDONTWRITEBYTECODE": "",
    "PYTHONPYCACHEPREFIX": str(Path(tempfile.gettempdir()) / "openenv-test-pycache"),
}
