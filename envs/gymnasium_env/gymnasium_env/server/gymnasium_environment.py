"""Any registered Gymnasium environment behind OpenEnv's `Environment` interface."""

from __future__ import annotations

import json
import os
from typing import Any
from uuid import uuid4

import gymnasium as gym

from openenv.core.env_server import Environment, InvalidActionError

from ..models import GymnasiumAction, GymnasiumObservation, GymnasiumState
from ..spaces import SpaceValueError, describe_space, from_jsonable, to_jsonable, to_jsonable_any

DEFAULT_ENV_ID = "CartPole-v1"


class ActionValidationError(InvalidActionError):
    """An action outside the action space: VALIDATION_ERROR on the wire (`InvalidRequestError`
    on the client), with the offending field in `errors[0]["loc"]`."""

    def __init__(self, exc: SpaceValueError) -> None:
        loc = exc.path.replace("[", ".").replace("]", "").split(".")
        super().__init__(
            f"Invalid action: {exc}",
            errors=[{"loc": loc, "msg": exc.reason, "type": "value_error"}],
        )


def _default_kwargs() -> dict[str, Any]:
    raw = os.environ.get("GYMNASIUM_ENV_KWARGS", "").strip()
    if not raw:
        return {}
    kwargs = json.loads(raw)
    if not isinstance(kwargs, dict):
        raise ValueError("GYMNASIUM_ENV_KWARGS must be a JSON object")
    return kwargs


def _allowed_ids() -> set[str] | None:
    raw = os.environ.get("GYMNASIUM_ALLOWED_ENV_IDS", "").strip()
    return {part.strip() for part in raw.split(",") if part.strip()} if raw else None


class GymnasiumEnvironment(Environment[GymnasiumAction, GymnasiumObservation, GymnasiumState]):
    """Serves `GYMNASIUM_ENV_ID` (default CartPole-v1) made with `GYMNASIUM_ENV_KWARGS`;
    `reset(env_id=..., env_kwargs=...)` switches the episode to another registered id."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    # Steps of an arbitrary Gymnasium env (MuJoCo, Box2D, Atari, rendering) can take
    # milliseconds, so they run on worker threads.
    RUNS_ON_EVENT_LOOP = False

    def __init__(self, env_id: str | None = None, env_kwargs: dict[str, Any] | None = None):
        super().__init__()
        self._default_id = env_id or os.environ.get("GYMNASIUM_ENV_ID") or DEFAULT_ENV_ID
        self._default_kwargs = dict(env_kwargs) if env_kwargs is not None else _default_kwargs()
        self._env: gym.Env | None = None
        self._env_key: tuple[str, str] | None = None
        self._active = False
        self._state = GymnasiumState(env_id=self._default_id, env_kwargs=self._default_kwargs)
        self._make(self._default_id, self._default_kwargs)  # fail fast on a bad server config

    # -- helpers ----------------------------------------------------------------------

    def _check_allowed(self, env_id: str) -> None:
        if env_id == self._default_id:
            return
        allowed = _allowed_ids()
        if allowed is not None and env_id not in allowed:
            raise ValueError(f"env_id {env_id!r} is not allowed on this server: {sorted(allowed)}")
        if ":" in env_id:  # "module:Env" would import arbitrary modules
            raise ValueError(
                f"env_id {env_id!r}: module-qualified ids are not accepted per episode"
            )
        if env_id not in gym.registry:
            raise ValueError(f"env_id {env_id!r} is not a registered Gymnasium environment")

    def _make(self, env_id: str, env_kwargs: dict[str, Any]) -> gym.Env:
        key = (env_id, json.dumps(env_kwargs, sort_keys=True, default=str))
        if self._env is None or self._env_key != key:
            if self._env is not None:
                self._env.close()
                self._env = None
            self._env = gym.make(env_id, **env_kwargs)
            self._env_key = key
        return self._env

    def _observation(
        self, obs: Any, reward: float | None, terminated: bool, truncated: bool, info: Any
    ) -> GymnasiumObservation:
        env = self._env
        assert env is not None
        return GymnasiumObservation(
            observation=to_jsonable(env.observation_space, obs),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            done=terminated or truncated,
            info=to_jsonable_any(dict(info or {})),
            env_id=self._state.env_id,
            action_space=describe_space(env.action_space),
            observation_space=describe_space(env.observation_space),
        )

    # -- Environment ------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        env_id: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> GymnasiumObservation:
        target = env_id or self._default_id
        self._check_allowed(target)
        if env_kwargs is None:
            env_kwargs = self._default_kwargs if target == self._default_id else {}
        if not isinstance(env_kwargs, dict):
            raise ValueError("env_kwargs must be an object")
        env = self._make(target, env_kwargs)
        obs, info = env.reset(seed=seed, options=options)
        if seed is not None:
            env.action_space.seed(seed)
        self._active = True
        self._state = GymnasiumState(
            episode_id=episode_id or str(uuid4()), env_id=target, env_kwargs=env_kwargs, seed=seed
        )
        return self._observation(obs, None, False, False, info)

    def step(
        self, action: GymnasiumAction, timeout_s: float | None = None, **kwargs: Any
    ) -> GymnasiumObservation:
        if not self._active or self._env is None:
            raise RuntimeError("The episode is over or was never started: call reset()")
        try:
            native = from_jsonable(self._env.action_space, action.action, "action")
        except SpaceValueError as exc:
            raise ActionValidationError(exc) from exc
        obs, reward, terminated, truncated, info = self._env.step(native)
        reward = float(reward)
        terminated, truncated = bool(terminated), bool(truncated)
        self._state.step_count += 1
        self._state.episode_return += reward
        self._state.terminated = terminated
        self._state.truncated = truncated
        if terminated or truncated:
            self._active = False
        return self._observation(obs, reward, terminated, truncated, info)

    @property
    def state(self) -> GymnasiumState:
        return self._state

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
