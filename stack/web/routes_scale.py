"""Admin routes for capacity: the exam lock and ``POST /admin/scale`` (``proctor scale``).

The lock is checked here, on the stack's side, against the windows stored in the ledger
(stack/ledger/exam_lock.py); the pool is then resized by the deployment's executor at
``PROCTOR_CONTROL_URL`` (for the embedded stack: the runner's control endpoint,
stack/embedded/control.py). So ``proctor scale`` works against any deployment that runs
web nodes with an executor URL, and nothing bypasses the lock on the way. Every refusal,
override and completed scale is an ``audit_log`` record.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

import httpx
from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field, model_validator
from sqlalchemy import select

from stack.config import Settings
from stack.ledger.exam_lock import ExamWindow, UnknownExam, open_windows, set_window, violations, windows
from stack.ledger.outcomes import audit
from stack.ledger.schema import audit_log
from stack.web.routes_common import StateDep, require_admin

__all__ = ["router", "EXECUTOR_TIMEOUT"]

router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])

EXECUTOR_TIMEOUT = 300.0
"""Seconds a scale may take: starting nodes plus draining (at most HAProxy's timeout server each)."""

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
        with state.engine.begin() as conn:
            set_window(conn, window)
            audit(conn, "admin", "exam.window_set", window.as_dict(time.time()))
    except UnknownExam:
        raise HTTPException(status_code=404, detail=f"unknown exam {exam_code!r}") from None
    return window.as_dict(time.time())


@router.get("/lock")
def lock_state(state: StateDep) -> dict:
    now = time.time()
    with state.read_engine.connect() as conn:
        stored = windows(conn)
    return {"now": now, "locked": any(w.is_open(now) for w in stored), "windows": [w.as_dict(now) for w in stored]}


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
    current = _executor(state.settings, "GET", "/control/pools")["pools"].get(body.pool, 0)
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


def _audit(state: Any, actor: str, action: str, detail: dict[str, Any]) -> None:
    with state.engine.begin() as conn:
        audit(conn, actor, action, detail)


def _executor(settings: Settings, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call the deployment's executor; its refusals (409) and errors come back named."""
    base = settings.control_url
    if not base:
        raise HTTPException(status_code=503, detail="no scale executor: PROCTOR_CONTROL_URL is not set on this node")
    headers = {"X-Admin-Token": settings.admin_token}
    try:
        response = httpx.request(method, f"{base}{path}", json=body, headers=headers,
                                 timeout=EXECUTOR_TIMEOUT, trust_env=False)
    except httpx.HTTPError as exc:
        raise HTTPException(status_code=502, detail=f"scale executor {base}: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        detail = response.json().get("detail", response.text) if response.content else response.reason_phrase
        raise HTTPException(status_code=409 if response.status_code == 409 else 502,
                            detail=f"scale executor: {detail}")
    return response.json()  # type: ignore[no-any-return]
