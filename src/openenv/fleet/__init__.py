"""Fleets: thousands of sessions of one environment over many servers, on any provider.

    from openenv.fleet import EnvFleet
    async with EnvFleet("echo", sessions=1000, provider="local") as fleet:
        vec = await fleet.vector(1000)
        batch = await vec.reset()

The same trainer code runs on one machine (`provider="local"`) or a cluster (`"ray"`,
`"kubernetes"`): only the provider changes. See docs/scaling.md. Importing this package
imports no cluster client: providers are loaded when a fleet starts.
"""

from .errors import FleetError, FleetFullError, NeedsResetError, ServerLostError
from .fleet import EnvFleet, FleetStats
from .ratelimit import CreationRateLimiter
from .sync import SyncEnvFleet, SyncVectorEnv
from .vector import BatchResult, SlotResult, VectorEnv

__all__ = [
    "BatchResult",
    "CreationRateLimiter",
    "EnvFleet",
    "FleetError",
    "FleetFullError",
    "FleetStats",
    "NeedsResetError",
    "ServerLostError",
    "SlotResult",
    "SyncEnvFleet",
    "SyncVectorEnv",
    "VectorEnv",
]
