"""OpenEnv's module path for the environment class (`textarena_env.server.environment`)."""

from .textarena_environment import TextArenaEnvironment

__all__ = ["TextArenaEnvironment"]
