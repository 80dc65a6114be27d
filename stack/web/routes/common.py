"""What every route shares: the node's state, the ownership and admin checks, the
request guard (node header, body limit, request counting) and the 422 shape."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import Engine, bindparam, select
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stack import admin_auth
from stack.config import Settings
from stack.ledger.attempts import Attempt, get_attempt, question_count
from stack.ledger.exam_rules import RuleCache
from stack.ledger.prepared import Prepared
from stack.ledger.schema import attempts
from stack.web.answer_sink import AnswerSink
from stack.web.auth import Principal, bearer_principal
from stack.web.capacity_lock import CapacityLock
from stack.web.dispatch import Dispatcher, ValkeyClients
from stack.web.metrics import RequestCounters
from stack.web.ratelimit import Limiter, NoLimits

__all__ = [
    "AttemptDep",
    "AttemptOwners",
    "NODE_HEADER",
    "PrincipalDep",
    "RequestGuard",
    "StateDep",
    "WebState",
    "attempt_links",
    "get_state",
    "owned_attempt",
    "request_principal",
    "require_admin",
    "validation_error_handler",
]

log = logging.getLogger(__name__)

NODE_HEADER = "X-Proctor-Node"


_OWNER = Prepared(select(attempts.c.student_id, attempts.c.exam_code).where(attempts.c.id == bindparam("id")))

OWNERS_KEPT = 200_000
"""Attempts whose owner a node remembers (about 200 bytes each); past it the oldest are forgotten."""


class AttemptOwners:
    """The (student, exam) of each attempt this node has seen, read once per attempt.

    No route, job or admin action changes an attempt's student or exam, and ids are never
    reused, so a remembered owner stays true: an answer checks ownership with no query after
    its attempt's first one. Everything that does change (open or finished) is read in the
    answer's own transaction. Unknown ids are not remembered; a forgotten one is read again."""

    def __init__(self, engine: Engine, kept: int = OWNERS_KEPT) -> None:
        self._engine, self._kept = engine, kept
        self._owners: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self.reads = 0  # ledger reads made, for tests and the benchmark

    def owner_of(self, attempt_id: str) -> tuple[str, str] | None:
        """(student_id, exam_code) of the attempt, or None if the ledger has no such attempt."""
        owner = self._owners.get(attempt_id)
        if owner is None:
            owner = self._read(attempt_id)
        return owner

    def _read(self, attempt_id: str) -> tuple[str, str] | None:
        self.reads += 1
        with self._engine.connect() as conn:
            row = _OWNER.run(conn, {"id": attempt_id}).first()
        if row is None:
            return None
        owner = (row.student_id, row.exam_code)
        with self._lock:
            if len(self._owners) >= self._kept:
                del self._owners[next(iter(self._owners))]  # the oldest remembered
            self._owners[attempt_id] = owner
        return owner


@dataclass
class WebState:
    settings: Settings
    engine: Engine
    read_engine: Engine  # deferred, query-only on SQLite: reads never wait for the write lock
    clients: ValkeyClients
    dispatcher: Dispatcher
    answers: AnswerSink  # durable, or the write-behind negative control: chosen once in app.py
    counters: RequestCounters = field(default_factory=RequestCounters)
    draining: threading.Event = field(default_factory=threading.Event)
    limiter: Limiter = field(default_factory=NoLimits)  # the node's is chosen once in app.py
    capacity_lock: CapacityLock | None = None  # held by POST /admin/scale and PUT .../window (routes_scale)
    rules: RuleCache = field(init=False)  # the exams' windows and policies (stack/ledger/exam_rules.py)
    owners: AttemptOwners = field(init=False)  # who owns each attempt seen (the answer path's check)
    _exams: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rules = RuleCache(self.read_engine)
        self.owners = AttemptOwners(self.read_engine)

    def question_count(self, exam_code: str) -> int | None:
        """Questions of an exam, or None if unknown. Cached: exam rows are written once by
        init_ledger and never change, and the answer path should not pay a read for them."""
        count = self._exams.get(exam_code)
        if count is None:
            with self.read_engine.connect() as conn:
                count = question_count(conn, exam_code)
            if count is not None:
                self._exams[exam_code] = count
        return count


# Dependencies that do no I/O are async: FastAPI runs a sync one in the threadpool, and that
# hop (a queue handoff and a GIL switch each way) cost more CPU than the work (docs/ramp.md).
async def get_state(request: Request) -> WebState:
    return request.app.state.proctor  # type: ignore[no-any-return]


async def request_principal(request: Request) -> Principal:
    return bearer_principal(request)


StateDep = Annotated[WebState, Depends(get_state)]
PrincipalDep = Annotated[Principal, Depends(request_principal)]


def owned_attempt(attempt_id: str, principal: PrincipalDep, state: StateDep) -> Attempt:
    """The attempt named in the path if the token covers it (a token is scoped to one student and
    one exam). Anything else is the same 404 as an unknown id: a 403 for another student's attempt
    told an attacker which ids exist."""
    with state.read_engine.connect() as conn:
        attempt = get_attempt(conn, attempt_id)
    if attempt is None or attempt.student_id != principal.student_id or attempt.exam_code != principal.exam_code:
        raise HTTPException(status_code=404, detail="unknown attempt")
    return attempt


AttemptDep = Annotated[Attempt, Depends(owned_attempt)]


def attempt_links(attempt_id: str) -> dict[str, str]:
    base = f"/v1/attempts/{attempt_id}"
    return {
        "answers": f"{base}/answers/{{question}}",
        "finish": f"{base}/finish",
        "merit_card": f"{base}/merit-card",
        "narrative": f"{base}/narrative",
    }


def require_admin(request: Request, state: StateDep) -> None:
    """Admin routes: loopback peers with the admin token only (stack.admin_auth). They are served
    only on the node's admin listener (bound to loopback, never routed by HAProxy)."""
    admin_auth.require_admin(request, state.settings.admin_token)


async def validation_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    """422 naming the field; without pydantic's ``input`` echo, which would leak answers and tokens."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in errors]
    return JSONResponse(status_code=422, content={"detail": detail})


class RequestGuard:
    """Pure ASGI middleware around every HTTP request.

    - stamps ``X-Proctor-Node`` on every response, including 413 and 500;
    - refuses more than ``max_headers`` header fields with 431 (under h11; the httptools
      protocol refuses them before the app, stack/web/bounded_http.py);
    - refuses a body over ``max_body_bytes`` with 413 before anything parses it: by the
      declared Content-Length, and by counting what actually arrives (chunked bodies);
    - counts requests and 5xx for /metrics, and turns an unhandled error into a 500
      that still names the node.
    """

    def __init__(self, app: ASGIApp, settings: Settings, counters: RequestCounters) -> None:
        self.app = app
        self.node = settings.node_name
        self.limit = settings.max_body_bytes
        self.max_headers = settings.max_headers
        self.counters = counters

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500, "started": False}
        started = time.perf_counter()

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[NODE_HEADER] = self.node
                status.update(code=message["status"], started=True)
            await send(message)

        try:
            if len(scope["headers"]) > self.max_headers:  # the server bounded the bytes (stack.web.bounded_http)
                await self._reply(stamped, 431, {"detail": f"more than {self.max_headers} header fields"})
                return
            body = await self._read_body(scope, receive)
            if body is None:
                await self._reply(stamped, 413, {"detail": f"request body over {self.limit} bytes"})
            else:
                await self.app(scope, _replay(body, receive), stamped)
        except Exception:  # the last line of defence: log, answer 500 if we still can
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if not status["started"]:
                await self._reply(stamped, 500, {"detail": "internal error"})
        finally:
            route = scope.get("route")  # set by the router on a match: the template, never the raw path
            self.counters.record(int(status["code"]), self.node, getattr(route, "path", "unmatched"),
                                 scope.get("method", ""), time.perf_counter() - started)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None when it is over the limit (declared or actual)."""
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return None
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break  # client went away; the app will see the disconnect on its next receive
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return None
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)

    @staticmethod
    async def _reply(send: Send, code: int, content: dict) -> None:
        payload = json.dumps(content).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": code, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the buffered body once, then defers to the real one."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
