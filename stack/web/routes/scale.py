"""Admin routes for capacity: the exam lock and ``POST /admin/scale`` (``proctor scale``).

The lock is checked here, on the stack's side, against the windows stored in the ledger
(stack/ledger/exam_lock.py); the pool is then resized by the deployment's executor at
``PROCTOR_CONTROL_URL`` (for the embedded stack: the runner's control endpoint,
stack/embedded/control.py). So ``proctor scale`` works against any deployment that runs
web nodes with an executor URL, and nothing bypasses the lock on the way. Every refusal,
override and completed scale is an ``audit_log`` record.

A scale and a window write both hold the capacity lock (stack/web/capacity_lock.py): a
scale from before it reads the pool and the windows until the executor answers, a window
write for its write. A route that finds the lock held answers 409 at once, with
``Retry-After`` and a detail naming the holder; it does not wait, since a scale may hold
the lock for minutes and a request should not hang that long.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from typing import Any, Iterator, Literal

import httpx
from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field, model_validator
from sqlalchemy import select

from stack.config import Settings
from stack.headers import ADMIN_TOKEN_HEADER
from stack.ledger.exam_lock import ExamWindow, UnknownExam, open_windows, set_window, violations, windows
from stack.ledger.outcomes import audit
from stack.ledger.schema import audit_log
from stack.web.capacity_lock import Lease, LockHeld, LockUnavailable, describe_holder
from stack.web.routes.common import StateDep, WebState, require_admin

__all__ = ["router", "CAPACITY_LOCK_TTL", "EXECUTOR_TIMEOUT", "POOLS_TIMEOUT"]

log = logging.getLogger(__name__)

router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])

EXECUTOR_TIMEOUT = 300.0
"""Seconds a scale may take: starting nodes plus draining (at most HAProxy's timeout server each)."""

POOLS_TIMEOUT = 30.0
"""Seconds to read the pools' sizes from the executor (a lookup, no work)."""

CAPACITY_LOCK_TTL = POOLS_TIMEOUT + EXECUTOR_TIMEOUT + 60.0
"""The capacity lock outlives everything a scale waits for under it (pools read, then the
executor), so it expires while held only if the node itself died, and then it frees itself."""

RETRY_AFTER_SCALE, RETRY_AFTER_WINDOW = 5, 1
RETRY_AFTER_LOCK_UNAVAILABLE = 2
"""Retry-After (s) of the 503 when Valkey cannot hold the lock (down, or full: a filled Valkey
was freed within seconds in valkey_memory_pressure); the caller retries, nothing was changed."""
"""Retry-After (s) when a scale holds the lock (a drain takes seconds; the detail says when the
lock expires at the latest) and when a window write does (a few milliseconds)."""

Pool = Literal["web", "merit", "ai", "sms"]


class WindowBody(BaseModel):
    opens_at: float
    closes_at: float
    min_web: int = Field(ge=1)
    min_workers: dict[Literal["merit", "ai", "sms"], int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ordered(self) -> "WindowBody":
        if self.closes_at <= self.opens_at:
            raise ValueError("closes_at must be after opens_at")
        if any(v < 0 for v in self.min_workers.values()):
            raise ValueError("min_workers: every minimum must be >= 0")
        return self


class ScaleBody(BaseModel):
    pool: Pool
    n: int = Field(ge=0)
    force: bool = False
    actor: str = Field(default="admin", min_length=1, max_length=64)
    reason: str = Field(default="", max_length=500)


@router.put("/exams/{exam_code}/window")
def put_window(exam_code: str, body: WindowBody, state: StateDep) -> dict:
    window = ExamWindow(exam_code, body.opens_at, body.closes_at, body.min_web, dict(body.min_workers))
    try:
        with _capacity_lock(state, what="window", exam_code=exam_code, actor="admin"), state.engine.begin() as conn:
            set_window(conn, window)
            audit(conn, "admin", "exam.window_set", window.as_dict(time.time()))
        state.rules.forget()  # the exam's rules follow the window: this node at once, the others within a second
    except UnknownExam:
        raise HTTPException(status_code=404, detail=f"unknown exam {exam_code!r}") from None
    return window.as_dict(time.time())


@router.get("/lock")
def lock_state(state: StateDep) -> dict:
    now = time.time()
    with state.read_engine.connect() as conn:
        stored = windows(conn)
    return {"now": now, "locked": any(w.is_open(now) for w in stored), "windows": [w.as_dict(now) for w in stored],
            "capacity_lock": _capacity_lock_state(state)}


def _capacity_lock_state(state: WebState) -> dict[str, Any]:
    """Who holds the capacity lock now (a scale or a window write), for ``proctor lock`` and the digest."""
    if state.capacity_lock is None:
        return {"held": False, "error": "no capacity lock on this node"}
    try:
        holder = state.capacity_lock.holder()
    except LockUnavailable as exc:
        return {"held": None, "error": str(exc)}
    return {"held": holder is not None, "holder": holder,
            "description": describe_holder(holder) if holder else None}


@router.get("/audit")
def audit_records(state: StateDep, action: str | None = None) -> dict:
    query = select(audit_log).order_by(audit_log.c.id)
    if action is not None:
        query = query.where(audit_log.c.action == action)
    with state.read_engine.connect() as conn:
        rows = [{**dict(r._mapping), "detail": json.loads(r.detail)} for r in conn.execute(query)]
    return {"records": rows}


@router.post("/scale")
def scale(body: ScaleBody, state: StateDep) -> dict:
    _require_executor(state.settings)  # a node that cannot scale says so without taking the lock
    with _capacity_lock(state, what="scale", pool=body.pool, to=body.n, actor=body.actor) as lease:
        return _scale_under_lock(body, state, lease)


def _scale_under_lock(body: ScaleBody, state: WebState, lease: Lease) -> dict:
    """From the pool's size and the windows to the executor's answer: no window opens meanwhile."""
    current = _executor(state.settings, "GET", "/control/pools", timeout=POOLS_TIMEOUT)["pools"].get(body.pool, 0)
    _describe_holder(lease, current)
    with state.read_engine.connect() as conn:
        broken = violations(open_windows(conn, time.time()), body.pool, body.n) if body.n < current else []
    request = {"pool": body.pool, "from": current, "to": body.n, "actor": body.actor, "reason": body.reason}
    if broken and not body.force:
        _audit(state, body.actor, "scale.refused", {**request, "violations": [v.as_dict() for v in broken]})
        raise HTTPException(status_code=409, detail="; ".join(v.message for v in broken))
    if broken:  # recorded before acting, so an override that fails half-way is on record too
        _audit(state, body.actor, "scale.lock_override", {**request, "violations": [v.as_dict() for v in broken]})
    result = _executor(state.settings, "POST", "/control/scale", {"pool": body.pool, "n": body.n})
    _audit(state, body.actor, "scale.done", {**request, "drains": result.get("drains", [])})
    return {**result, "lock_overridden": [v.as_dict() for v in broken]}


@contextlib.contextmanager
def _capacity_lock(state: WebState, **holder: Any) -> Iterator[Lease]:
    """The capacity lock for the block, or the refusal: 409 + Retry-After naming the holder, 503 without Valkey."""
    if state.capacity_lock is None:
        raise HTTPException(status_code=503, detail="no capacity lock on this node (its app was built without one)")
    try:
        lease = state.capacity_lock.acquire(**holder)
    except LockHeld as held:
        raise _lock_held(held) from None
    except LockUnavailable as exc:  # Valkey down, or full under noeviction (the SET is refused): retry later
        raise HTTPException(status_code=503, detail=f"capacity lock unavailable, refusing to change capacity or "
                                                    f"windows without it: {exc}",
                            headers={"Retry-After": str(RETRY_AFTER_LOCK_UNAVAILABLE)}) from None
    try:
        yield lease
    finally:
        _release(state, lease)


def _release(state: WebState, lease: Lease) -> None:
    """Free the lease; one that expired while held (the node outlived the TTL) is audited."""
    try:
        released = lease.release()
    except LockUnavailable as exc:  # the TTL frees it; the work under it is done
        log.warning("capacity lock release failed: %s", exc)
        return
    if not released:
        _audit(state, str(lease.holder.get("actor")), "capacity_lock.expired_while_held", lease.holder)


def _lock_held(held: LockHeld) -> HTTPException:
    scale_holds = (held.holder or {}).get("what") == "scale"
    expires = f"; it expires in {math.ceil(held.expires_in)} s at the latest" if held.expires_in else ""
    return HTTPException(status_code=409, detail=f"capacity lock held by {describe_holder(held.holder)}{expires}; retry later",
                         headers={"Retry-After": str(RETRY_AFTER_SCALE if scale_holds else RETRY_AFTER_WINDOW)})


def _describe_holder(lease: Lease, current: int) -> None:
    """Put the pool's size into the lock's value, so a refused request can say ``web 3->1``."""
    try:
        lease.update(**{"from": current})
    except LockUnavailable as exc:  # only the description suffers; the lock is still held
        log.warning("capacity lock: could not record from=%s: %s", current, exc)


def _audit(state: Any, actor: str, action: str, detail: dict[str, Any]) -> None:
    with state.engine.begin() as conn:
        audit(conn, actor, action, detail)


def _require_executor(settings: Settings) -> str:
    if not settings.control_url:
        raise HTTPException(status_code=503, detail="no scale executor: PROCTOR_CONTROL_URL is not set on this node")
    return settings.control_url


def _executor(settings: Settings, method: str, path: str, body: dict[str, Any] | None = None,
              timeout: float = EXECUTOR_TIMEOUT) -> dict[str, Any]:
    """Call the deployment's executor; its refusals (409) and errors come back named."""
    base = _require_executor(settings)
    headers = {ADMIN_TOKEN_HEADER: settings.admin_token}
    try:
        response = httpx.request(method, f"{base}{path}", json=body, headers=headers,
                                 timeout=timeout, trust_env=False)
    except httpx.HTTPError as exc:
        raise HTTPException(status_code=502, detail=f"scale executor {base}: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        detail = response.json().get("detail", response.text) if response.content else response.reason_phrase
        raise HTTPException(status_code=409 if response.status_code == 409 else 502,
                            detail=f"scale executor: {detail}")
    return response.json()  # type: ignore[no-any-return]
