"""Real agents as RFC 005 harnesses: mini-swe-agent and Claude Code, each sandboxed with only the
model endpoint and the MCP bridge reachable (see `relay`)."""
