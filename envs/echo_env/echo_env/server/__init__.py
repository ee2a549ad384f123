"""Server side of the echo environment."""

from .echo_environment import EchoEnvironment

__all__ = ["EchoEnvironment"]
