"""ASGI app of the Gymnasium environment: `python -m gymnasium_env.server.app --port 8000`.

The served id comes from `GYMNASIUM_ENV_ID` (default CartPole-v1) and `GYMNASIUM_ENV_KWARGS`
(a JSON object), or from `--env-id` / `--env-kwargs`.
"""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import GymnasiumAction, GymnasiumObservation, GymnasiumState
from .gymnasium_environment import GymnasiumEnvironment

app = create_app(
    GymnasiumEnvironment,
    GymnasiumAction,
    GymnasiumObservation,
    env_name="gymnasium_env",
    state_cls=GymnasiumState,
)


def main(argv: list[str] | None = None) -> None:
    serve_main(
        "gymnasium_env.server.app:app",
        argv,
        env_options={"--env-id": "GYMNASIUM_ENV_ID", "--env-kwargs": "GYMNASIUM_ENV_KWARGS"},
    )


if __name__ == "__main__":
    main()
