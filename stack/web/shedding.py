"""Load shedding at the node: a bound on requests in flight, past it a 503 with Retry-After.

Past its capacity a node that keeps accepting only builds a queue (in uvicorn, in the
threadpool, behind the ledger's write lock) until HAProxy's queue timeout answers for it
with a bare 503 that names no node, or until a ledger lock times out. Refusing at once is
cheaper for everyone: the refusal costs no thread and no ledger access, it names the
node (``X-Proctor-Node``, stamped by the request guard around this middleware) and it
tells the client when to come back. Nothing was done for a shed request, so a retry is
always safe, idempotency key or not.

Health routes are never shed: a node at capacity is busy, not down, and HAProxy must not
take it out of rotation for being busy (that would move its whole load to the others).
The counter lives on the event loop (one thread), so it needs no lock.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["EXEMPT_PATHS", "SHED_RETRY_AFTER", "InFlightLimit"]

SHED_RETRY_AFTER = 1
"""Seconds a shed client is told to wait: about the time a full node takes to drain its bound."""

EXEMPT_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

_BODY = json.dumps({"detail": "node at capacity, retry later"}).encode()
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_BODY)).encode()),
            (b"retry-after", str(SHED_RETRY_AFTER).encode())]


class InFlightLimit:
    """Pure ASGI middleware: at most ``limit`` HTTP requests inside ``app`` at once."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_in_flight={limit!r}: must be at least 1")
        self.app = app
        self.limit = limit
        self.in_flight = 0
        self.shed = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            self.shed += 1
            await send({"type": "http.response.start", "status": 503, "headers": _HEADERS})
            await send({"type": "http.response.body", "body": _BODY})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
