"""Liveness, readiness and metrics (admin listener and admin token only), plus draining on SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel
from fastapi.responses import JSONResponse, PlainTextResponse

from stack.web.metrics import render_metrics
from stack.web.guards import documented
from stack.web.routes.common import StateDep, WebState, require_admin

__all__ = ["PROMETHEUS_CONTENT_TYPE", "Readiness", "drain_on_sigterm", "metrics", "metrics_router", "router"]

log = logging.getLogger(__name__)

router = APIRouter()
metrics_router = APIRouter(dependencies=[Depends(require_admin)])
"""/metrics: on the admin listener only (stack.web.app), and only with the admin token: queue
depths and request counts are the operator's, not the public's, and a loopback peer is no
credential (another local user reaches the listener too). Prometheus sends it as a header
(``http_headers`` in a scrape config)."""

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@router.get("/healthz", responses=documented())
def healthz(state: StateDep) -> dict:
    return {"status": "ok", "node": state.settings.node_name}


class Readiness(BaseModel):
    status: str  # ready | draining
    node: str


@router.get("/readyz", response_model=Readiness,
            responses={**documented(), 503: {"model": Readiness, "description": "draining: route elsewhere"}})
def readyz(state: StateDep) -> JSONResponse:
    # Readiness is about routing, not the ledger: a ledger check here would take
    # SQLite's write lock on every load-balancer probe.
    if state.draining.is_set():
        return JSONResponse({"status": "draining", "node": state.settings.node_name}, status_code=503)
    return JSONResponse({"status": "ready", "node": state.settings.node_name})


@metrics_router.get("/metrics", responses=documented(), response_class=PlainTextResponse)
def metrics(state: StateDep) -> PlainTextResponse:
    text = render_metrics(state.settings.node_name, state.counters, state.clients, state.read_engine, state.draining.is_set(),
                          state.limiter.fallbacks)
    return PlainTextResponse(text, media_type=PROMETHEUS_CONTENT_TYPE)


def drain_on_sigterm(state: WebState) -> None:
    """Chain a SIGTERM handler that marks the node draining before uvicorn's own shutdown.

    uvicorn installs its handlers before the lifespan starts and restores the
    originals on exit, so chaining here is safe. Off the main thread (TestClient)
    signals cannot be handled; there the lifespan shutdown sets draining instead.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: FrameType | None) -> Any:
        state.draining.set()
        log.warning("node %s draining on SIGTERM", state.settings.node_name)
        if callable(previous):
            return previous(signum, frame)
        if previous == signal.SIG_DFL:
            raise SystemExit(128 + signum)
        return None

    signal.signal(signal.SIGTERM, handler)
