"""Guards every route shares: who the client is (behind trusted proxies only), the
identity-keyed request limit, a busy ledger as 503, and the documented error replies."""

from __future__ import annotations

import hmac
import logging
from typing import Any

from fastapi import Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from pydantic import BaseModel

from stack.web.auth import Principal, bearer_principal
from stack.web.ratelimit import ACCOUNT_ROUTE, Limiter, too_many

__all__ = [
    "BUSY_RETRY_AFTER",
    "ErrorBody",
    "account_limit",
    "PROXY_HEADER",
    "client_address",
    "from_our_proxy",
    "documented",
    "is_ledger_busy",
    "ledger_busy_handler",
    "limit_account",
    "route_of",
    "unparsable_body_handler",
]

log = logging.getLogger(__name__)

BUSY_RETRY_AFTER = 1
"""Seconds a client is told to wait when the ledger is busy (a lock timeout)."""

_DESCRIPTIONS = {
    401: "missing, malformed, forged or expired credentials",
    403: "the credentials do not cover this resource",
    404: "unknown resource",
    409: "conflicts with what the ledger already holds",
    413: "request body over the node's limit",
    422: "invalid input; names the field",
    429: "request limit of this account (or, for login, this network) reached; see Retry-After",
    503: "the ledger is busy (lock timeout) or the node is draining; see Retry-After",
}


class ErrorBody(BaseModel):
    detail: str


def documented(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: the given codes plus 413 and 503, which any route can give."""
    wanted = sorted({*codes, 413, 503})
    return {code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]} for code in wanted if code != 422}


PROXY_HEADER = "x-proctor-proxy"
"""Set by HAProxy to the run's proxy secret (stack/embedded/haproxy.py, docker/haproxy.cfg)."""


def from_our_proxy(request: Request) -> bool:
    """Whether the request came through HAProxy: it carries the run's proxy secret (compared in
    constant time). A peer address is no proof: any local process can bind 127.0.0.2."""
    secret = request.app.state.proctor.settings.proxy_secret
    offered = request.headers.get(PROXY_HEADER)
    return bool(secret) and offered is not None and hmac.compare_digest(offered.encode(), secret.encode())


def client_address(request: Request) -> str:
    """The client's address: the peer, or, on the proxy's authenticated path, the address the
    proxy put in ``X-Forwarded-For`` (the last entry: the one our proxy appended; what a client
    sent before it is its own claim). Off that path the header is never believed."""
    peer = request.client.host if request.client else ""
    forwarded = request.headers.get("x-forwarded-for", "")
    if forwarded.strip() and from_our_proxy(request):
        return forwarded.split(",")[-1].strip()
    return peer


def account_limit(request: Request) -> None:
    """Dependency of every authenticated route: one counter per (account, route template)."""
    limit_account(request.app.state.proctor.limiter, bearer_principal(request), request.method, route_of(request))


def route_of(request: Request) -> str:
    """The route template the request matched (the limiter's key), never the raw path."""
    return getattr(request.scope.get("route"), "path", request.url.path)  # type: ignore[no-any-return]


def limit_account(limiter: Limiter, principal: Principal, method: str, route: str) -> None:
    """Count one request of the account on the route; 429 once over ``ACCOUNT_ROUTE``. The answer
    path calls it inside its one threadpool hop (stack/web/routes/answers.py)."""
    verdict = limiter.hit(ACCOUNT_ROUTE, principal.exam_code, principal.student_id, method, route)
    if not verdict.allowed:
        raise too_many(verdict)


_SQLITE_BUSY = ("database is locked", "database is busy", "database table is locked")
_PG_BUSY_STATES = {"55P03", "57014", "40P01", "40001"}  # lock n/a, statement/lock timeout, deadlock, serialization


def is_ledger_busy(exc: BaseException) -> bool:
    """A lock or busy timeout, or a lost connection: transient, nothing committed, retry helps.
    A missing table or a bad query is not: it stays a 500 (a bug to see, not to retry)."""
    orig = getattr(exc, "orig", exc)
    state = getattr(orig, "sqlstate", None)
    if state is not None:
        return state in _PG_BUSY_STATES or state.startswith("08")
    message = str(orig).lower()
    if any(text in message for text in _SQLITE_BUSY):
        return True
    return type(orig).__module__.startswith("psycopg")  # connection-level: no SQLSTATE at all


async def ledger_busy_handler(request: Request, exc: Exception) -> JSONResponse:
    """SQLite "database is locked", a PostgreSQL lock timeout or lost connection: nothing was
    committed, the client may retry. A 503 with Retry-After, never a 500."""
    if not is_ledger_busy(exc):
        raise exc
    log.warning("ledger busy on %s %s: %s", request.method, request.url.path, type(exc).__name__)
    return JSONResponse({"detail": "ledger busy, retry later"}, status_code=503,
                        headers={"Retry-After": str(BUSY_RETRY_AFTER)})




async def unparsable_body_handler(request: Request, exc: Exception) -> Response:
    """FastAPI answers a body it cannot even decode with a bare 400; it is invalid input like
    any other, so it gets the documented 422 naming the body."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code != 400:
        return await http_exception_handler(request, exc)
    detail = [{"loc": ["body"], "msg": "request body could not be parsed", "type": "body_unparsable"}]
    return JSONResponse({"detail": detail}, status_code=422)
