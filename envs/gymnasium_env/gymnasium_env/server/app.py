"""ASGI app of the Gymnasium environment: `python -m gymnasium_env.server.app --port 8000`.

The served id comes from `GYMNASIUM_ENV_ID` (default CartPole-v1) and `GYMNASIUM_ENV_KWARGS`
(a JSON object), or from `--env-id` / `--env-kwargs`.
"""

from __future__ import annotations

import argparse
import os

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import run_server

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
    parser = argparse.ArgumentParser(description="Serve a Gymnasium environment.")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--env-id", help="Gymnasium id (sets GYMNASIUM_ENV_ID)")
    parser.add_argument("--env-kwargs", help="JSON object (sets GYMNASIUM_ENV_KWARGS)")
    args = parser.parse_args(argv)
    if args.env_id:
        os.environ["GYMNASIUM_ENV_ID"] = args.env_id
    if args.env_kwargs:
        os.environ["GYMNASIUM_ENV_KWARGS"] = args.env_kwargs
    run_server("gymnasium_env.server.app:app", host=args.host, port=args.port, workers=args.workers)


if __name__ == "__main__":
    main()
