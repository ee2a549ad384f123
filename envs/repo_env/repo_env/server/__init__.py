"""Server side of the repository environment."""

from .repo_environment import RepoEnvironment

__all__ = ["RepoEnvironment"]
