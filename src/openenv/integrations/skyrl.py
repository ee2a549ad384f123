"""SkyRL: a served environment as a `skyrl_gym` text environment.

SkyRL's generator drives `BaseTextEnv`: `init(prompt)` once, then `step(model_reply)` returning
`BaseTextEnvStepOutput` (observations as chat messages, reward, done, metadata) until done.
`OpenEnvTextEnv` is that interface over one `TextEpisode`: the reward of every step is the
environment's, and an environment failure raises `EnvironmentInfrastructureError` (SkyRL then
fails the trajectory instead of training on a made-up 0).

`skyrl_gym` is imported only when `OpenEnvTextEnv` (or `register_skyrl_env`) is first used.

Configuration (SkyRL passes `env_config` from `environment.skyrl_gym.<env>` and `extras` from
the dataset row): `base_url` (required, in either), `max_turns` (default 10), `seed`,
`invalid_action_reward`, `system_prompt`, `reset_kwargs`; a dataset row may carry them in its
`extra_info`, directly in `extras`, or under `extras["openenv"]` (latest wins).
`served_env=` (a `ServedEnv`) reuses one already made.
"""

from __future__ import annotations

import functools
import json
import threading
from typing import Any

from ._episodes import EnvironmentInfrastructureError, ServedEnv, TextEpisode

__all__ = [
    "EnvironmentInfrastructureError",
    "ServedEnv",
    "register_skyrl_env",
    "skyrl_env_class",
]

_SETTINGS = ("base_url", "max_turns", "seed", "invalid_action_reward", "system_prompt")


def _settings(env_config: Any, extras: dict[str, Any]) -> dict[str, Any]:
    """Environment config, overridden per row by `extras` and `extras["openenv"]`."""
    settings: dict[str, Any] = {}
    if env_config is not None:
        items = env_config.items() if hasattr(env_config, "items") else vars(env_config).items()
        settings.update({str(k): v for k, v in items})
    keys = (*_SETTINGS, "reset_kwargs")
    extra_info = extras.get("extra_info")
    if isinstance(extra_info, dict):
        settings.update({k: extra_info[k] for k in keys if k in extra_info})
    settings.update({k: extras[k] for k in keys if k in extras})
    settings.update(dict(extras.get("openenv") or {}))
    return settings


_served_lock = threading.Lock()
#: One `ServedEnv` per server and settings: SkyRL makes an environment per trajectory, and the
#: server's tools need asking only once.
_served: dict[str, ServedEnv] = {}


def _served_env(settings: dict[str, Any]) -> ServedEnv:
    if not settings.get("base_url"):
        raise ValueError("OpenEnvTextEnv needs base_url (env_config or extras)")
    base_url = str(settings["base_url"])
    penalty = float(settings.get("invalid_action_reward", 0.0))
    system_prompt = settings.get("system_prompt")
    reset_kwargs = dict(settings.get("reset_kwargs") or {})
    key = json.dumps([base_url, penalty, system_prompt, reset_kwargs], sort_keys=True, default=str)
    with _served_lock:
        if key not in _served:
            _served[key] = ServedEnv(
                base_url,
                invalid_action_reward=penalty,
                system_prompt=None if system_prompt is None else str(system_prompt),
                reset_kwargs=reset_kwargs,
            )
        return _served[key]


@functools.cache
def skyrl_env_class() -> type:
    """The `BaseTextEnv` subclass, built on first use so `skyrl_gym` is imported lazily."""
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

    class OpenEnvTextEnv(BaseTextEnv):
        """One episode of a served environment per instance (SkyRL makes one per trajectory)."""

        def __init__(
            self,
            env_config: Any = None,
            extras: dict[str, Any] | None = None,
            *,
            served_env: ServedEnv | None = None,
        ) -> None:
            super().__init__()
            extras = dict(extras or {})
            settings = _settings(env_config, extras)
            self.max_turns = int(settings.get("max_turns", 10))
            seed = settings.get("seed")
            self._seed = None if seed is None else int(seed)
            self._task = extras.get("task")
            if served_env is None:
                served_env = _served_env(settings)
            self._served = served_env
            self._episode: TextEpisode | None = None
            self._invalid_actions = 0

        @property
        def episode(self) -> TextEpisode:
            if self._episode is None:
                raise RuntimeError("call init(prompt) first")
            return self._episode

        def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict]:
            """The dataset's prompt followed by the environment's reset observation."""
            self._episode = self._served.episode(task=self._task, seed=self._seed)
            first = self._episode.initial_messages()
            return list(prompt or []) + first, {"tools": [t.name for t in self._episode.tools]}

        def step(self, action: str) -> Any:
            self.turns += 1
            step = self.episode.step_text(action)
            self._invalid_actions += int(bool(step.metadata.get("invalid_action")))
            done = step.done or self.turns >= self.max_turns
            observations = [] if done else [{"role": "user", "content": step.observation}]
            return BaseTextEnvStepOutput(
                observations=observations,
                reward=step.reward,
                done=done,
                metadata=dict(step.metadata),
            )

        def get_metrics(self) -> dict[str, Any]:
            episode = self._episode
            return {
                "turns": self.turns,
                "env_reward": 0.0 if episode is None else episode.total_reward,
                "env_done": bool(episode is not None and episode.done),
                "invalid_actions": self._invalid_actions,
            }

        def close(self) -> None:
            episode, self._episode = self._episode, None
            if episode is not None:
                episode.close()

    return OpenEnvTextEnv


def register_skyrl_env(env_id: str = "openenv") -> None:
    """Register `OpenEnvTextEnv` with skyrl_gym, so `skyrl_gym.make(env_id, env_config=...,
    extras=...)` (and SkyRL's `environment.env_class=<env_id>`) builds it."""
    import skyrl_gym

    if env_id not in skyrl_gym.registry:
        skyrl_gym.register(id=env_id, entry_point=skyrl_env_class())


def __getattr__(name: str) -> Any:
    if name == "OpenEnvTextEnv":
        return skyrl_env_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
