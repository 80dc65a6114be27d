"""Job functions of the three lanes; workers import them by dotted path.

Each job is idempotent by operation id: it first looks for a ``ready`` outcome (in the
read transaction, on a WAL snapshot, that also reads what the job needs) and, if there
is one, only marks the outbox row done. Otherwise it does its work and
writes the outcome and ``done`` in ONE transaction (BEGIN IMMEDIATE), re-checking
for a ready outcome inside it, so two runs of one operation write one outcome.
The narrative and SMS jobs read score and position only from the ready merit card,
never from a fresh computation: the relay hands them to a lane only once that card
exists (docs/architecture.md, "Merit first"), so what a student is texted is what the
card says. Provider calls carry ``Idempotency-Key: <operation_id>`` so a re-run after an
unknown outcome (worker killed after the provider accepted) adds no second effect;
``PROCTOR_SMS_IDEMPOTENCY=off`` drops the key for SMS as the negative control.

A forking worker (the ``fork`` model) runs every job in a fresh child (RQ's horse); a ``simple``
one runs them all in its own process, which keeps the engines and the HTTP client between jobs.
The worker calls ``prepare_worker`` once: settings and the engines (dialect initialised, no
connection left open) are built there and inherited; a horse only drops any pool it
inherited (never a connection shared across fork). A ``simple`` worker's engines keep a
connection between jobs (``SIMPLE_WORKER_POOL_SIZE``); a forking worker's open one per
transaction. The HTTP client is built on a job's first provider call, so a merit horse never
builds one (nor imports httpx).
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from stack.config import CASE_AI_CALL_SECONDS, CASE_MERIT_COMPUTE_SECONDS, CASE_SMS_CALL_SECONDS, Settings, load_settings
from stack.ledger import outbox, outcomes
from stack.ledger.engine import make_engine, make_reader
from stack.ledger.grading import OPTIONS
from stack.ledger.ranking import merit_of

if TYPE_CHECKING:
    import httpx

__all__ = [
    "OPTIONS",
    "MeritCardNotReady",
    "compute_merit_card",
    "http_timeout",
    "job_timeout",
    "merit_of",
    "prepare_worker",
    "provider_auth",
    "reset_process_state",
    "send_result_sms",
]

T = TypeVar("T")
log = logging.getLogger("proctor.jobs")
_CALL_CASE_SECONDS = {"merit": 0.0, "narrative": CASE_AI_CALL_SECONDS, "sms": CASE_SMS_CALL_SECONDS}
_HTTP_SLACK_SECONDS = 10.0


@dataclass
class _Process:
    pid: int
    settings: Settings
    engine: Engine
    reader: Engine  # plain BEGIN on a WAL snapshot: reads never queue for the write lock answers need
    sms_call: ProviderCall  # chosen once from the settings (sms_call below), kept by a forked horse
    http: httpx.Client | None = None  # built on the first provider call
    http_source: str | None = None  # the local address ``http`` is bound to (None: the OS picks)


_process: _Process | None = None


def http_timeout(settings: Settings) -> float:
    """Long enough for the slowest provider call at this time scale, never unbounded."""
    return max(_CALL_CASE_SECONDS.values()) * settings.time_scale * 3 + _HTTP_SLACK_SECONDS


def job_timeout(kind: str, settings: Settings) -> int:
    """RQ job_timeout: integer seconds >= 1 (RQ truncates floats; 0 is refused)."""
    work = settings.scaled(CASE_MERIT_COMPUTE_SECONDS) if kind == "merit" else http_timeout(settings)
    return max(30, int(work * 2) + 30)


def _ssl_context() -> ssl.SSLContext:
    """One context per worker tree (every CA parsed once; cached by ``loopback_http.default_tls``), built in
    the parent by ``prepare_worker``; a context per horse cost ~0.2 s of a 3.4 ms merit job."""
    from stack import loopback_http  # imports httpx: the merit lane never gets here

    return loopback_http.default_tls()


SIMPLE_WORKER_POOL_SIZE = 1
"""Ledger connections a ``simple`` worker keeps open per engine: it runs one job at a time, in
this process. Each job otherwise opened and closed a connection per transaction (two or three a
job), with its pragmas: about a fifth of a merit job's CPU (docs/embedded.md, "Worker models")."""


def _current(lane: str | None = None) -> _Process:
    """This process's settings, engines and client. The first call decides whether the engines
    keep connections: only a worker that never forks (``lane``'s model ``simple``, known once
    ``prepare_worker`` asks); a forking worker's horses must not inherit an open one."""
    global _process
    if _process is None:
        settings = load_settings()
        pool_size = SIMPLE_WORKER_POOL_SIZE if lane is not None and settings.worker_models.get(lane) == "simple" else 0
        engine = make_engine(settings, pool_size=pool_size)
        _process = _Process(os.getpid(), settings, engine, make_reader(settings, engine, pool_size=pool_size),
                            sms_call=sms_call(settings))
    elif _process.pid != os.getpid():  # a forked horse: the parent's engines, never its connections
        _drop_pools(_process, close=False)  # SQLAlchemy's after-fork recipe: the parent's sockets stay its own
        _process = _Process(os.getpid(), _process.settings, _process.engine, _process.reader, sms_call=_process.sms_call)
    return _process


def _drop_pools(process: _Process, close: bool = True) -> None:
    """Empty any pooled engine (PostgreSQL). A NullPool holds no connection, and is left as
    is: recreating it could make every horse initialise the dialect again."""
    for engine in {process.engine, process.reader}:  # one engine on PostgreSQL
        if not isinstance(engine.pool, NullPool):
            engine.dispose(close=close)


def provider_auth(settings: Settings) -> Callable[[httpx.Request], httpx.Request]:
    """Adds the lanes' bearer token of the provider a request goes to (by URL: the AI provider's
    or the SMS gateway's, each its own per-run token; docs/security.md)."""
    tokens = ((settings.ai_url, settings.ai_client_token), (settings.sms_url, settings.sms_client_token))

    def add_token(request: httpx.Request) -> httpx.Request:
        url = str(request.url)
        for base, token in tokens:
            if token and url.startswith(base.rstrip("/") + "/"):
                request.headers["Authorization"] = f"Bearer {token}"
        return request

    return add_token


def _http(process: _Process) -> httpx.Client:
    """The provider client, bound to the SMS lane's egress address when the deployment assigns
    one (stack/lanes/egress.py): read per job, so a moved reserved address is used at once."""
    from stack.lanes.egress import source_address

    source = source_address(process.settings)
    if process.http is not None and process.http_source != source:
        process.http.close()
        process.http = None
    if process.http is None:
        import httpx

        timeout = httpx.Timeout(http_timeout(process.settings), connect=2.0)
        transport = httpx.HTTPTransport(verify=_ssl_context(), local_address=source)
        process.http = httpx.Client(timeout=timeout, transport=transport, auth=provider_auth(process.settings))
        process.http_source = source
    return process.http


def prepare_worker(lane: str) -> None:
    """In a worker's parent, before any fork: what every horse would otherwise build per job.

    Settings and both engines; each engine connects once (the dialect is initialised here)
    and runs the look-ups (and, the write engine, the ``done`` mark) every job makes, in a
    transaction rolled back, so SQLAlchemy's statement compilation (~1-3 ms per statement,
    cold) is warm in every horse. No connection stays
    open: NullPool closes it, a pooled engine is disposed. Best effort: with the ledger
    unreachable the worker still starts and its horses pay as before. The provider lanes
    also get the TLS context and a throw-away HTTP client, whose first construction
    imports httpx's transport (~16 ms per horse otherwise); the merit lane imports no httpx.
    """
    process = _current(lane)
    try:
        for engine in {process.engine, process.reader}:  # one engine on PostgreSQL
            with engine.connect() as conn, conn.begin() as transaction:  # rolled back: changes nothing
                outcomes.ready_outcome(conn, "")
                outbox.get_row(conn, "")
                if engine is process.engine:  # the reader is query_only
                    outbox.mark_done(conn, "")
                transaction.rollback()
    except SQLAlchemyError as exc:
        log.warning("ledger not warmed in the worker's parent (%s); each job pays it", exc)
    finally:
        _drop_pools(process)
    if lane != "merit":
        import httpx

        httpx.Client(verify=_ssl_context()).close()


def reset_process_state() -> None:
    """Forget cached settings, engines and client (tests that change the environment)."""
    global _process
    if _process is not None and _process.pid == os.getpid():
        if _process.http is not None:
            _process.http.close()
        _process.engine.dispose()
        _process.reader.dispose()  # the same engine on PostgreSQL: a second dispose is harmless
    _process = None


class MeritCardNotReady(LookupError):
    """A narrative or SMS job ran before its attempt's merit card was ready.

    The relay never enqueues one before the card, so this means something bypassed
    that rule; the job fails loudly (and is retried) instead of computing a position.
    """


def _burn_cpu(seconds: float) -> None:
    """Real CPU work standing in for the seed's 0.34 s recomputation (lanes compete for cores)."""
    deadline = time.perf_counter() + seconds
    block = b"proctor"
    while time.perf_counter() < deadline:
        for _ in range(200):
            block = hashlib.sha256(block).digest()


def _unless_ready(process: _Process, op: str, read: Callable[[Connection, dict[str, Any]], T]) -> T | None:
    """``read(conn, outbox_row)``, or None if the operation already has its ready outcome (its row
    is then marked done). One read transaction on a WAL snapshot: the write lock, which answers
    need, is taken only for that mark and for the outcome itself."""
    with process.reader.begin() as conn:
        if outcomes.ready_outcome(conn, op) is None:
            row = outbox.get_row(conn, op)
            if row is None:
                raise LookupError(f"no outbox row {op}")
            return read(conn, row)
    with process.engine.begin() as conn:
        outbox.mark_done(conn, op)
    return None


def _commit_outcome(process: _Process, op: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Write-once: the re-check and the insert share the BEGIN IMMEDIATE write lock."""
    with process.engine.begin() as conn:
        row = outbox.get_row(conn, op)
        if row is None:
            raise LookupError(f"no outbox row {op}")
        outcomes.write_ready(conn, op, row["attempt_id"], kind, payload)
        outbox.mark_done(conn, op)
        stored = outcomes.ready_outcome(conn, op)
    assert stored is not None
    return {"operation_id": op, "status": "ready", "payload": stored["payload"]}


def _merit_card(conn: Connection, row: dict[str, Any]) -> dict[str, Any]:
    """The ready merit card of the row's attempt: the only source of score and position."""
    card = outcomes.ready_outcome(conn, f"merit-{row['attempt_id']}")
    if card is None:
        raise MeritCardNotReady(f"{row['operation_id']}: the merit card of attempt {row['attempt_id']} is not ready")
    return card["payload"]


def compute_merit_card(operation_id: str) -> dict[str, Any]:
    process = _current()
    merit = _unless_ready(process, operation_id, lambda conn, row: merit_of(conn, row["attempt_id"]))
    if merit is None:
        return {"operation_id": operation_id, "status": "ready", "replayed": True}
    _burn_cpu(process.settings.scaled(CASE_MERIT_COMPUTE_SECONDS))
    return _commit_outcome(process, operation_id, "merit", {**merit, "computed_at": time.time()})


def _call_provider(process: _Process, url: str, request: dict[str, Any]) -> dict[str, Any]:
    """One side-effecting provider call, reconciled before any replay.

    A re-run may follow an unknown outcome (the worker died after the provider acted).
    Its request is the same as the first one (both come from the write-once merit card),
    but a provider may still hold another body under the key (a run of an older release).
    So: ask the provider what it did for this operation first; send with the operation
    id as Idempotency-Key; and if the provider says the key was used with another body
    (409), take what it recorded. Never a second effect, never a job failed for a call
    that succeeded.
    """
    op = request["operation_id"]
    if (recorded := _recorded_response(process, url, op)) is not None:
        return recorded
    response = _http(process).post(url, json=request, headers={"Idempotency-Key": op})
    if response.status_code == 409 and (recorded := _recorded_response(process, url, op)) is not None:
        return recorded
    response.raise_for_status()
    return response.json()


def _send_blindly(process: _Process, url: str, request: dict[str, Any]) -> dict[str, Any]:
    """The negative control's provider call: a naive client that replays blindly, with no key
    and no look-up first, so a re-run after an unknown outcome sends a second SMS."""
    response = _http(process).post(url, json=request)
    response.raise_for_status()
    return response.json()


ProviderCall = Callable[[_Process, str, dict[str, Any]], dict[str, Any]]


def sms_call(settings: Settings) -> ProviderCall:
    """How the SMS lane calls the gateway, chosen once per worker process: the one place
    PROCTOR_SMS_IDEMPOTENCY is read (off = the negative control)."""
    return _call_provider if settings.controls.sms_idempotency else _send_blindly


def _recorded_response(process: _Process, url: str, op: str) -> dict[str, Any] | None:
    response = _http(process).get(f"{url}/{op}")
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return response.json()["response"]


def send_result_sms(operation_id: str) -> dict[str, Any]:
    process = _current()
    card = _unless_ready(process, operation_id, _merit_card)
    if card is None:
        return {"operation_id": operation_id, "status": "ready", "replayed": True}
    to = f"student:{card['student_id']}"
    text = f"{card['exam_code']}: you scored {card['score']}/{card['max_score']}, position {card['position']}."
    request = {"operation_id": operation_id, "to": to, "body": text}
    import httpx

    from stack.lanes import sms_refusals  # the AI lane's classes for a refused send (issue #11)

    held = sms_refusals.hold_if_paused(process, operation_id)
    if held is not None:
        return held
    try:
        body = process.sms_call(process, f"{process.settings.sms_url}/v1/messages", request)
    except httpx.HTTPStatusError as exc:
        handled = sms_refusals.on_refusal(process, operation_id, exc.response)
        if handled is None:
            raise
        return handled
    sent = {"message_id": body["message_id"], "to": body["to"], "body": body["body"]}  # as the gateway recorded it
    return _commit_outcome(process, operation_id, "sms", sent)
