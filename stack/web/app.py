"""FastAPI app factory for one web node: wiring only, no logic.

``python -m uvicorn stack.web.app:create_app --factory`` reads the environment;
tests pass Settings (and may inject a dispatcher). The ledger's tables are created
by the runner (or the test) before any node starts, never here.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError

from stack.config import Settings, load_settings
from stack.ledger.engine import make_engine
from stack.web import (
    routes_admin,
    routes_answers,
    routes_attempts,
    routes_health,
    routes_outcomes,
    routes_sessions,
)
from stack.web.dispatch import Dispatcher, ValkeyClients, ValkeyDispatcher
from stack.web.routes_common import RequestGuard, WebState, validation_error_handler
from stack.web.routes_health import drain_on_sigterm
from stack.web.write_behind import WriteBehind

__all__ = ["create_app"]

_ROUTERS = (routes_sessions, routes_attempts, routes_answers, routes_outcomes, routes_admin, routes_health)


def create_app(settings: Settings | None = None, *, dispatcher: Dispatcher | None = None) -> FastAPI:
    settings = load_settings() if settings is None else settings
    engine = make_engine(settings)
    read_engine = make_engine(settings, read_only=True)
    clients = ValkeyClients(settings)
    dispatcher = ValkeyDispatcher(settings, engine, clients) if dispatcher is None else dispatcher
    state = WebState(settings=settings, engine=engine, read_engine=read_engine, clients=clients, dispatcher=dispatcher)
    if settings.answer_write_behind > 0:
        state.write_behind = WriteBehind(engine, settings.node_name, settings.answer_write_behind)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        drain_on_sigterm(state)
        yield
        state.draining.set()
        dispatcher.close()
        if state.write_behind is not None:
            state.write_behind.close()
        clients.close()
        engine.dispose()
        read_engine.dispose()

    app = FastAPI(title=f"Proctor web node {settings.node_name}", lifespan=lifespan)
    app.state.proctor = state
    for module in _ROUTERS:
        app.include_router(module.router)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_middleware(RequestGuard, settings=settings, counters=state.counters)
    return app
