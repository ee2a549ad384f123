"""The FastAPI application that serves one environment over HTTP, WebSocket and MCP."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Body, Depends, FastAPI, Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from openenv import settings

from ..errors import ServerError
from ..protocol import (
    NEW_SESSION,
    SESSION_HEADER,
    ResetRequest,
    ResetResponse,
    StepRequest,
    WSErrorCode,
    dumps,
    error_category,
    error_data,
    session_id_from_scope,
    validation_errors,
)
from . import log_redaction
from .asgi import BodyTooLarge, DirectWebSocketRoutes, read_body, replay
from .config import ServerConfig, web_interface_enabled
from .harness_ws import HarnessSocket, builds_harness_environment
from .http_errors import install_error_handlers, strict_json_routes
from .interfaces import Environment, state_class_of
from .mcp_endpoint import MCPEndpoint
from .metrics import WORKER_SCOPE_HEADER, merge, peer_snapshots, render
from .runner import freeze_startup_objects
from .security import OPEN_PATHS, AccessGuard
from .serialization import deserialize_action, encode_observation_reply
from .sessions import Session, SessionManager
from .shutdown import SigtermDrain
from .types import (
    Action,
    ConcurrencyConfig,
    EnvironmentMetadata,
    HealthResponse,
    Observation,
    SchemaResponse,
    ServerCapacityStatus,
    ServerMode,
    State,
)
from .workers import WorkerRouter
from .ws import WebSocketHandler

logger = logging.getLogger("openenv.server")
#: OpenAPI `info.version`: OpenEnv tooling reads "1.x" as the HTTP protocol profile.
PROTOCOL_VERSION = "1.0.0"

EnvFactory = Callable[[], Environment]


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        dumps(payload), status_code=status, media_type="application/json", headers=headers
    )


def _observation_response(obs: Observation, session_id: str | None = None) -> Response:
    return _body_response(encode_observation_reply(obs).body(session_id), session_id)


def _body_response(body: bytes, session_id: str | None) -> Response:
    headers = {SESSION_HEADER: session_id} if session_id is not None else None
    return Response(body, media_type="application/json", headers=headers)


def _error_response(exc: ServerError) -> Response:
    headers = {"Retry-After": "1"} if exc.http_status == 503 else None
    return _json({"detail": exc.to_data()}, exc.http_status, headers)


def _named_session(request: Request) -> str | None:
    """The session an HTTP request names (`X-OpenEnv-Session-Id` or `?session_id=`)."""
    return session_id_from_scope(request.scope)


class BodySizeLimit:
    """Refuses HTTP bodies over the configured size (413), declared or streamed in chunks."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = int(value) if value.isdigit() else None
                break
        if declared is not None:
            if declared > self.limit:
                await self._refuse(send, declared)
                return
            await self.app(scope, receive, send)  # the server enforces Content-Length itself
            return
        # No declared length (chunked): read it all first, within the limit, then replay it.
        try:
            body = await read_body(receive, self.limit)
        except BodyTooLarge as exc:
            await self._refuse(send, exc.size)
            return
        if body is not None:
            await self.app(scope, replay(body, receive), send)

    async def _refuse(self, send: Send, size: int) -> None:
        body = dumps(
            {
                "detail": error_data(
                    WSErrorCode.MESSAGE_TOO_LARGE,
                    f"Request body of {size} bytes exceeds the limit of {self.limit} bytes",
                    limit=self.limit,
                )
            }
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


class HTTPEnvServer:
    """Binds an environment factory to the OpenEnv routes."""

    def __init__(
        self,
        env: EnvFactory,
        action_cls: type[Action],
        observation_cls: type[Observation],
        max_concurrent_envs: int | None = None,
        concurrency_config: ConcurrencyConfig | None = None,
        *,
        env_name: str | None = None,
        state_cls: type[State] | None = None,
        config: ServerConfig | None = None,
        **options: Any,
    ) -> None:
        if max_concurrent_envs is not None and concurrency_config is not None:
            raise ValueError("Pass either max_concurrent_envs or concurrency_config, not both")
        if concurrency_config is not None:
            max_concurrent_envs = concurrency_config.max_concurrent_envs
            if concurrency_config.session_timeout is not None:
                options.setdefault("session_timeout", concurrency_config.session_timeout)
        if config is None:
            config = ServerConfig.from_env(max_concurrent_envs=max_concurrent_envs, **options)
        elif max_concurrent_envs is not None:
            config.max_concurrent_envs = max_concurrent_envs
        self.config = config
        self.manager = SessionManager(env, config)
        self.action_cls = action_cls
        self.observation_cls = observation_cls
        self.state_cls = state_cls or state_class_of(self.manager.env_class)
        self.env_name = env_name
        self.mode = ServerMode.SIMULATION
        self.mcp = MCPEndpoint(self)
        self.ws = WebSocketHandler(self)
        self._metadata: EnvironmentMetadata | None = None

    # -- properties kept from OpenEnv's HTTPEnvServer -------------------------------------

    @property
    def active_sessions(self) -> int:
        return len(self.manager.sessions)

    @property
    def max_concurrent_envs(self) -> int:
        return self.manager.max_sessions

    @property
    def is_concurrency_safe(self) -> bool:
        return bool(getattr(self.manager.env_class, "SUPPORTS_CONCURRENT_SESSIONS", False))

    def get_capacity_status(self) -> ServerCapacityStatus:
        return self.manager.capacity()

    def error_response(self, exc: ServerError) -> Response:
        """The HTTP reply to `exc`, counted in the metrics."""
        if self.manager.metrics is not None:
            self.manager.metrics.error(exc.code, exc.category)
        return _error_response(exc)

    def get_session_info(self, session_id: str) -> Any:
        session = self.manager.sessions.get(session_id)
        return session.info() if session is not None else None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any = None) -> AsyncIterator[None]:
        """Start the reaper with the app; on shutdown close every session and environment.

        SIGTERM drains first (see `shutdown.SigtermDrain`): in-flight calls get to reply for up
        to `shutdown_grace_s`, then WebSocket clients get close code `CLOSE_RESTART` (1012).
        """
        # Everything imported so far lives as long as the process: keep it out of the garbage
        # collector's full passes, which otherwise stall every session under load.
        freeze_startup_objects()
        self.manager.ensure_reaper()
        drain = SigtermDrain(lambda: self.manager.drain(self.config.shutdown_grace_s))
        drain.install()
        try:
            yield
        finally:
            drain.uninstall()
            await self.manager.shutdown()

    # -- routes ---------------------------------------------------------------------------

    def register_routes(self, app: FastAPI, mode: ServerMode | str = ServerMode.SIMULATION):
        try:
            self.mode = ServerMode(mode.lower() if isinstance(mode, str) else mode)
        except ValueError:
            raise ValueError(
                f"Invalid server mode {mode!r}: use 'simulation' or 'production'"
            ) from None
        self.manager.env_mode = self.mode.value
        install_error_handlers(app)
        with strict_json_routes(app):
            self._register_routes(app)

    def _register_routes(self, app: FastAPI) -> None:
        server = self

        @app.get("/health", response_model=HealthResponse, tags=["Health"])
        async def health() -> Response:
            if server.manager.draining:  # load balancers stop sending new sessions here
                return _json({"status": "draining"}, 503)
            return _json({"status": "healthy"})

        @app.get("/metadata", response_model=EnvironmentMetadata, tags=["Environment Info"])
        async def metadata() -> Response:
            try:
                return _json((await server.metadata()).model_dump())
            except ServerError as exc:
                return server.error_response(exc)

        @app.get("/schema", response_model=SchemaResponse, tags=["Schema"])
        async def schema() -> Response:
            return _json(server.schema())

        metrics = server.manager.metrics
        if metrics is not None:

            @app.get("/metrics", tags=["Health"], response_class=Response)
            async def metrics_text(request: Request) -> Response:
                """Prometheus metrics (text format) of every worker; see docs/metrics.md."""
                if request.headers.get(WORKER_SCOPE_HEADER) == "worker":
                    return Response(metrics.snapshot_json(), media_type="application/json")
                snapshots = [metrics.snapshot()]
                directory = settings.WORKER_DIR.get()
                if directory:
                    snapshots += await peer_snapshots(
                        directory,
                        settings.WORKER_ID.get() or "",
                        request.headers.get("authorization"),
                    )
                body, content_type = render(merge(snapshots))
                return Response(body, media_type=content_type)

        @app.get("/capacity", response_model=ServerCapacityStatus, tags=["Health"])
        async def capacity() -> Response:
            return _json(server.manager.capacity().model_dump())

        @app.post("/mcp", tags=["MCP"])
        async def mcp_post(request: Request) -> Response:
            return await server.mcp.http_post(request)

        @app.delete("/mcp", tags=["MCP"])
        async def mcp_delete(request: Request) -> Response:
            return await server.mcp.http_delete(request)

        @app.get("/mcp", tags=["MCP"])
        async def mcp_get() -> Response:
            # Streamable HTTP: this server sends no server-initiated stream.
            return Response(status_code=405, headers={"Allow": "POST, DELETE"})

        app.add_api_websocket_route("/ws", self.ws)
        app.add_api_websocket_route("/mcp", self.mcp.websocket)

        if self.mode is ServerMode.SIMULATION:
            self._register_simulation_routes(app)
        elif builds_harness_environment(self.manager.env_class):
            # Talking to the agent harness is production use: a real user's messages.
            app.add_api_websocket_route("/harness", HarnessSocket(self))

    def _register_simulation_routes(self, app: FastAPI) -> None:
        server = self
        manager = self.manager

        @app.post("/reset", response_model=ResetResponse, tags=["Environment Control"])
        async def reset(
            request: ResetRequest | None = Body(default=None),
            sid: str | None = Depends(_named_session),
        ) -> Response:
            """Start an episode. Send session id `new` to open an HTTP session (returned in the
            reply), an existing id to start a new episode in it, or none to stay stateless."""
            kwargs = request.model_dump(exclude_unset=True) if request is not None else {}
            try:
                if not sid:
                    obs = await manager.with_throwaway_env(lambda s: manager.reset(s, kwargs))
                    return _observation_response(obs)
                if sid == NEW_SESSION:
                    session = await manager.create("http")
                else:
                    session = manager.get(sid, by="http")
                try:
                    obs = await manager.reset(session, kwargs)
                except ServerError:
                    if sid == NEW_SESSION:
                        await manager.destroy(session, "reset failed")
                    raise
                return _observation_response(obs, session.id)
            except ServerError as exc:
                return server.error_response(exc)

        @app.post("/step", response_model=ResetResponse, tags=["Environment Control"])
        async def step(request: StepRequest, sid: str | None = Depends(_named_session)) -> Response:
            """Apply an action. With a session id it acts on that session's episode, and a
            `request_id` makes it idempotent: a repeat gets the first outcome."""
            try:
                action = deserialize_action(request.action, server.action_cls)
            except ValidationError as exc:
                if manager.metrics is not None:
                    code = WSErrorCode.VALIDATION_ERROR.value
                    manager.metrics.error(code, error_category(code).value)
                return _json({"detail": validation_errors(exc)}, 422)
            kwargs = request.model_dump(exclude_unset=True, exclude={"action"})
            try:
                if not sid:
                    obs = await manager.with_throwaway_env(
                        lambda s: manager.step(s, action, kwargs)
                    )
                    return _observation_response(obs)
                session = manager.get(sid, by="http")
                if request.request_id is None:
                    obs = await manager.step(session, action, kwargs)
                    return _observation_response(obs, session.id)

                # A re-sent request gets the outcome kept, or waits for the one running.
                rid = request.request_id
                replay = manager.replay_store(session)
                if not replay.begin(rid):
                    reply = await replay.outcome(rid)
                    return _body_response(reply.body(session.id), session.id)
                try:
                    reply = encode_observation_reply(await manager.step(session, action, kwargs))
                except BaseException as exc:
                    replay.finish(rid, exc)
                    raise
                replay.finish(rid, reply)
                return _body_response(reply.body(session.id), session.id)
            except ServerError as exc:
                return server.error_response(exc)

        @app.get("/state", tags=["State Management"])
        async def state(sid: str | None = Depends(_named_session)) -> Response:
            """The episode state, with every field of the environment's State class."""
            try:
                if not sid:
                    st = await manager.with_throwaway_env(manager.state)
                else:
                    st = await manager.state(manager.get(sid, by="http"))
                return _json(st.model_dump())
            except ServerError as exc:
                return server.error_response(exc)

        @app.delete("/sessions/{session_id}", tags=["Environment Control"])
        async def close_session(session_id: str) -> Response:
            """End an HTTP session and free its slot."""
            try:
                session = manager.get(session_id, by="http")
            except ServerError as exc:
                return server.error_response(exc)
            await manager.destroy(session, "closed by client")
            return _json({"session_id": session_id, "closed": True})

    # -- helpers ----------------------------------------------------------------------------

    async def metadata(self, session: Session | None = None) -> EnvironmentMetadata:
        """The environment's metadata, read once: from `session`'s environment or a live
        session's if there is one (no new instance, no slot to wait for), else from a
        throwaway environment, which takes a slot like any other instance."""
        if self._metadata is None:
            live = session if session is not None and session.env is not None else None
            if live is None:
                live = next((s for s in self.manager.sessions.values() if s.env is not None), None)
            if live is not None and live.env is not None:
                self._metadata = live.env.get_metadata()
            else:

                async def read(throwaway: Session) -> EnvironmentMetadata:
                    assert throwaway.env is not None
                    return throwaway.env.get_metadata()

                self._metadata = await self.manager.with_throwaway_env(read)
        return self._metadata

    def schema(self) -> dict[str, Any]:
        return {
            "action": self.action_cls.model_json_schema(),
            "observation": self.observation_cls.model_json_schema(),
            "state": self.state_cls.model_json_schema(),
        }


def _server_mode(mode: ServerMode | str | None) -> ServerMode:
    raw = mode if mode is not None else (settings.MODE.get() or "simulation")
    try:
        return ServerMode(raw.lower() if isinstance(raw, str) else raw)
    except ValueError:
        raise ValueError(f"Invalid server mode {raw!r}: use 'simulation' or 'production'") from None


def create_fastapi_app(
    env: EnvFactory,
    action_cls: type[Action],
    observation_cls: type[Observation],
    max_concurrent_envs: int | None = None,
    concurrency_config: ConcurrencyConfig | None = None,
    env_name: str | None = None,
    state_cls: type[State] | None = None,
    *,
    mode: ServerMode | str | None = None,
    web_interface: bool = False,
    web_title: str | None = None,
    web_renderer: str | os.PathLike[str] | None = None,
    **options: Any,
) -> FastAPI:
    """Build the app. `options` are `ServerConfig` fields (session_timeout, max_queued, ...).

    `web_interface` adds the `/web` playground (docs/web.md); `web_renderer` is a script that
    renders observations on it (else the environment class's `web_renderer` attribute).
    """
    server = HTTPEnvServer(
        env,
        action_cls,
        observation_cls,
        max_concurrent_envs,
        concurrency_config,
        env_name=env_name,
        state_cls=state_cls,
        **options,
    )
    app = FastAPI(
        title="OpenEnv Environment HTTP API",
        version=PROTOCOL_VERSION,
        description=f"Environment {env_name or server.manager.factory_name} served by openenv.",
        lifespan=server.lifespan,
        docs_url="/docs" if server.config.docs else None,
        redoc_url="/redoc" if server.config.docs else None,
    )
    server.register_routes(app, _server_mode(mode))
    if web_interface:
        _mount_playground(app, server, env, env_name, web_title, web_renderer)
    else:
        _mount_index(app, env_name or server.manager.factory_name)
    # Innermost of ours: `/ws` sockets skip the framework's layers (but not the checks below).
    app.add_middleware(DirectWebSocketRoutes, routes={"/ws": server.ws})
    app.add_middleware(BodySizeLimit, limit=server.config.max_message_bytes)
    if settings.WORKER_DIR.get():
        app.add_middleware(WorkerRouter)
    # Outermost: nothing runs for a request that lacks credentials or comes from a foreign page.
    app.add_middleware(
        AccessGuard,
        api_key=server.config.api_key,
        allowed_origins=server.config.allowed_origins,
        playground=web_interface,
        open_paths=OPEN_PATHS | {"/metrics"} if server.config.metrics_public else OPEN_PATHS,
    )
    app.state.openenv_server = server
    log_redaction.install()
    return app


def _mount_playground(
    app: FastAPI,
    server: HTTPEnvServer,
    env: EnvFactory,
    env_name: str | None,
    title: str | None,
    renderer: str | os.PathLike[str] | None,
) -> None:
    # Imported here: a server without the playground never loads it.
    from .web import mount_playground, renderer_of

    name = env_name or server.manager.factory_name
    mount_playground(
        app,
        title=title or f"{name} playground",
        env_name=name,
        api_key_required=server.config.api_key is not None,
        renderer=renderer_of(env, renderer),
    )


def _mount_index(app: FastAPI, name: str) -> None:
    """`GET /` without the playground: what this server is and its routes, instead of a bare
    404 (with the playground, `/` redirects to it). An extension: no OpenEnv client asks."""
    hint = (
        "the /web playground is off: serve with `openenv serve --web` or "
        "ENABLE_WEB_INTERFACE=1 to play an episode in a browser"
    )

    @app.get("/", include_in_schema=False)
    async def index(request: Request) -> Response:
        routes = sorted(
            {
                path
                for route in request.app.routes
                if (path := getattr(route, "path", "/")) != "/" and "oauth2" not in path
            }
        )
        return _json({"environment": name, "routes": routes, "web": hint})


#: OpenEnv's options for its Gradio page, which this server does not build (its playground is
#: a static page); `title_override` still names the page.
_GRADIO_OPTIONS = (
    "gradio_builder",
    "custom_tab_name",
    "custom_tab_primary",
    "show_default_tab",
)


def create_app(
    env: EnvFactory,
    action_cls: type[Action],
    observation_cls: type[Observation],
    env_name: str | None = None,
    max_concurrent_envs: int | None = None,
    concurrency_config: ConcurrencyConfig | None = None,
    *,
    state_cls: type[State] | None = None,
    mode: ServerMode | str | None = None,
    **options: Any,
) -> FastAPI:
    """Build the FastAPI app for an environment factory (OpenEnv's signature).

    The `/web` playground is on when `ENABLE_WEB_INTERFACE` is true/1/yes (OpenEnv's switch) or
    `web_interface=True` is passed.
    """
    if options.get("gradio_builder") is not None:
        logger.warning("gradio_builder is ignored: the /web playground is not a Gradio app")
    for gradio_only in _GRADIO_OPTIONS:
        options.pop(gradio_only, None)
    options.setdefault("web_title", options.pop("title_override", None))
    options["web_interface"] = web_interface_enabled(options.pop("web_interface", None))
    return create_fastapi_app(
        env,
        action_cls,
        observation_cls,
        max_concurrent_envs,
        concurrency_config,
        env_name,
        state_cls,
        mode=mode,
        **options,
    )
