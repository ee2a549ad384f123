"""The echo environment's app: `uvicorn server.app:app` from the environment folder, or
`python -m echo_env.server.app` once installed."""

from openenv.core.env_server.http_server import create_app

try:  # installed as the package `echo_env`
    from ..models import CallToolAction, CallToolObservation
    from .echo_environment import EchoEnvironment
except ImportError:  # served from the folder, where `server` is the top-level package
    from models import CallToolAction, CallToolObservation  # type: ignore[no-redef]
    from server.echo_environment import EchoEnvironment  # type: ignore[no-redef]

app = create_app(EchoEnvironment, CallToolAction, CallToolObservation, env_name="echo_env")


def main() -> None:
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
