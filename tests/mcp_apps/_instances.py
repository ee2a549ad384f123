"""Environments made by tests/mcp_apps servers, kept here (a module no server executes again)."""

from __future__ import annotations

from typing import Any

ENVS: list[Any] = []
