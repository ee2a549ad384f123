"""Server configuration errors; errors sent to clients live in `openenv.core.errors`."""

from __future__ import annotations


class ConcurrencyConfigurationError(ValueError):
    """More than one session was configured for an environment that does not support it."""
