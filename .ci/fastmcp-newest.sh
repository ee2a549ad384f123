#!/usr/bin/env bash
# The MCP fast path (src/openenv/core/env_server/mcp_fast_call.py) against the newest fastmcp that
# pyproject allows, as `pip install -e .` (the README's first command) resolves it. The rest of
# CI runs on uv.lock's fastmcp, so without this a newer release that pip users get would turn
# the fast path off, or break it, unnoticed.
#
# In a throwaway venv: installs the project with the newest allowed fastmcp, prints its version,
# checks that the fast path is on for it (a series in VERIFIED_SERIES with the internals it
# reads), then runs the fast-path tests: the case-by-case equivalence with fastmcp's own
# `call_tool` (tests/mcp/test_fast_call.py) and the MCP tool error and state tests, which go
# through it. ~40 s on an idle 2-core machine with a warm uv cache (~80 s under a load of 8).
# Needs uv (.ci/run installs it).
#
#   .ci/fastmcp-newest.sh [pytest args...]     e.g. -x, or -k NAME
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${FASTMCP_NEWEST_VENV:-$HOME/.cache/openenv-tests/fastmcp-newest-venv}"
python="$venv/bin/python"
start=$SECONDS

uv venv --clear --quiet --python "${FASTMCP_NEWEST_PYTHON:-3.11}" "$venv"
# A fresh venv resolves every package to its newest allowed version, as pip does (nothing of
# uv.lock is read); fastmcp's index page is fetched anew, not taken from uv's cache.
uv pip install --quiet --python "$python" --resolution highest --refresh-package fastmcp \
    -e . -e envs/echo_env pytest pytest-asyncio pytest-timeout

"$python" - <<'EOF'
from importlib.metadata import version

from openenv.core.env_server import mcp_fast_call

installed = version("fastmcp")
print(f"fastmcp-newest: fastmcp {installed} (mcp {version('mcp')})", flush=True)
if not mcp_fast_call.fast_path_supported():
    raise SystemExit(
        f"fastmcp-newest: the MCP fast path is OFF on fastmcp {installed}, the newest that "
        f"pyproject allows (verified series: {', '.join(mcp_fast_call.VERIFIED_SERIES)}). "
        "Port mcp_fast_call.py to it and add its series to VERIFIED_SERIES, or lower "
        "pyproject's fastmcp bound."
    )
print("fastmcp-newest: the MCP fast path is on", flush=True)
EOF

status=0
"$python" -m pytest -q -p no:cacheprovider \
    tests/mcp/test_fast_call.py tests/mcp/test_mcp_tool_errors.py tests/mcp/test_mcp_tool_state.py \
    "$@" || status=$?
echo "fastmcp-newest: $((SECONDS - start)) s"
exit "$status"
