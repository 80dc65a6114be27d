"""FastAPI app factories for one web node: wiring only, no logic.

A node has two listeners (``python -m stack.web.serve``): the public API, which HAProxy
routes, and the admin API (drain, undrain, exports) on ``PROCTOR_ADMIN_PORT``, bound to
loopback and never routed. ``create_node`` is the ASGI app serving both, telling them
apart by the local port a request arrived on. Tests pass Settings (and may inject a
dispatcher) to ``create_app`` and build the admin side with ``create_admin_app``. The
ledger's tables are created by the runner (or the test) before any node starts.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from stack.config import Settings, SettingsError, insecure_secrets, load_settings
from stack.ledger.engine import make_engine
from stack.ledger.revisions import revision_policy
from stack.web.routes import admin as routes_admin
from stack.web.routes import answers as routes_answers
from stack.web.routes import attempts as routes_attempts
from stack.web.routes import health as routes_health
from stack.web.routes import lanes as routes_ailane
from stack.web.routes import outcomes as routes_outcomes
from stack.web.routes import scale as routes_scale
from stack.web.routes import sessions as routes_sessions
from stack.web.answer_sink import AnswerSink, DurableAnswers
from stack.web.capacity_lock import CapacityLock
from stack.web.dispatch import Dispatcher, ValkeyClients, ValkeyDispatcher
from stack.web.guards import ledger_busy_handler, unparsable_body_handler
from limits import parse as parse_rate

from stack.web.ratelimit import Limiter, NoLimits, RequestLimiter
from stack.web.routes.common import RequestGuard, WebState, validation_error_handler
from stack.web.routes.health import drain_on_sigterm
from stack.web.shedding import InFlightLimit
from stack.web.group_commit import AckAtEnqueue, GroupCommitAnswers
from stack.web.write_behind import WriteBehind

__all__ = ["NodeApp", "create_admin_app", "create_app", "create_node", "refuse_insecure_secrets"]

LEDGER_POOL_SIZE = 8
"""Ledger connections a node keeps open per engine: answers serialise on SQLite's write lock,
so more would idle; a busier moment opens extra ones (stack.ledger.engine.make_engine)."""

_PUBLIC_ROUTERS = (routes_sessions, routes_attempts, routes_answers, routes_outcomes, routes_health)
_ADMIN_ROUTERS = (routes_admin, routes_ailane, routes_scale, routes_health)


def refuse_insecure_secrets(settings: Settings) -> None:
    """A node never runs on a secret that is written in this repository (or empty)."""
    weak = insecure_secrets(settings)
    if weak:
        raise SettingsError(f"{', '.join(weak)}: a known default or empty secret; `proctor up` draws random "
                            "ones per run (PROCTOR_ALLOW_DEFAULT_SECRETS=on is for tests only)")


def _answer_sink(settings: Settings, engine: Engine) -> AnswerSink:
    """The node's one choice of answer sink: durable (with the revision rule of PROCTOR_ANSWER_REVISIONS,
    "highest" unless a negative control picks another), one commit per answer or shared by the answers
    that arrive together (PROCTOR_ANSWER_SINK), unless a negative control acknowledges before the commit
    (write-behind, or ack-at-enqueue)."""
    if settings.controls.answer_write_behind > 0:
        return WriteBehind(engine, settings.node_name, settings.controls.answer_write_behind)
    policy = revision_policy(settings.controls.answer_revisions)
    if settings.controls.answer_sink == "group-commit":
        return GroupCommitAnswers(engine, settings.node_name, policy)
    if settings.controls.answer_sink == "ack-at-enqueue":
        return AckAtEnqueue(engine, settings.node_name, policy)
    return DurableAnswers(engine, settings.node_name, policy)


def _request_limiter(settings: Settings, clients: ValkeyClients) -> Limiter:
    """The node's one choice of request limiter: counted in Valkey, unless the PROCTOR_RATE_LIMITS=off
    negative control lets every request through."""
    if not settings.controls.rate_limits:
        return NoLimits()
    return RequestLimiter(clients, login_network=parse_rate(settings.login_network_limit))


def create_app(settings: Settings | None = None, *, dispatcher: Dispatcher | None = None) -> FastAPI:
    """The public API of a node (no admin routes)."""
    settings = load_settings() if settings is None else settings
    refuse_insecure_secrets(settings)
    engine = make_engine(settings, pool_size=LEDGER_POOL_SIZE)
    read_engine = make_engine(settings, read_only=True, pool_size=LEDGER_POOL_SIZE)
    clients = ValkeyClients(settings)
    dispatcher = ValkeyDispatcher(settings, engine, clients) if dispatcher is None else dispatcher
    state = WebState(settings=settings, engine=engine, read_engine=read_engine, clients=clients, dispatcher=dispatcher,
                     answers=_answer_sink(settings, engine),
                     limiter=_request_limiter(settings, clients),
                     capacity_lock=CapacityLock(clients, routes_scale.CAPACITY_LOCK_TTL, settings.node_name))

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        drain_on_sigterm(state)
        yield
        state.draining.set()
        dispatcher.close()
        state.answers.close()
        clients.close()
        engine.dispose()
        read_engine.dispose()

    # No /docs, /redoc or /openapi.json on the public listener: the admin listener serves the schema.
    app = FastAPI(title=f"Proctor web node {settings.node_name}", lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(InFlightLimit, limit=settings.max_in_flight)  # inside the guard: a shed reply names the node
    _wire(app, state, _PUBLIC_ROUTERS)
    return app


def create_admin_app(public: FastAPI) -> FastAPI:
    """The admin API over the same node state as ``public`` (whose lifespan owns it)."""
    state: WebState = public.state.proctor
    app = FastAPI(title=f"Proctor web node {state.settings.node_name} (admin)")
    _wire(app, state, _ADMIN_ROUTERS)
    app.include_router(routes_health.metrics_router)

    @app.get("/openapi/public.json", include_in_schema=False)
    def public_schema() -> dict:
        """The public API's schema (the public listener serves none)."""
        return public.openapi()

    return app


def _wire(app: FastAPI, state: WebState, routers: tuple) -> None:  # type: ignore[type-arg]
    app.state.proctor = state
    for module in routers:
        app.include_router(module.router)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(OperationalError, ledger_busy_handler)
    app.add_exception_handler(StarletteHTTPException, unparsable_body_handler)
    app.add_middleware(RequestGuard, settings=state.settings, counters=state.counters)


class NodeApp:
    """Both listeners of a node in one ASGI app: a request on the admin port goes to the
    admin API, anything else to the public one. Lifespan belongs to the public app."""

    def __init__(self, public: FastAPI, admin: FastAPI, admin_port: int) -> None:
        self.public, self.admin, self.admin_port = public, admin, admin_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server") or (None, None)
        target: ASGIApp = self.admin if scope["type"] == "http" and server[1] == self.admin_port else self.public
        await target(scope, receive, send)


def create_node(settings: Settings | None = None) -> NodeApp:
    settings = load_settings() if settings is None else settings
    public = create_app(settings)
    return NodeApp(public, create_admin_app(public), settings.admin_port)
