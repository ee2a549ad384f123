"""ASGI app of the trading environment: `python -m trading_env.server.app --port 8000`."""

from __future__ import annotations

from openenv.core.env_server import create_app
from openenv.core.env_server.runner import serve_main

from ..models import TradingAction, TradingObservation, TradingState
from .trading_environment import TradingEnvironment

app = create_app(
    TradingEnvironment,
    TradingAction,
    TradingObservation,
    env_name="trading_env",
    state_cls=TradingState,
)


def main(argv: list[str] | None = None) -> None:
    serve_main("trading_env.server.app:app", argv)


if __name__ == "__main__":
    main()
