"""The exam lock: a stored open/close window and a minimum capacity per exam.

While an exam's window is open (``opens_at <= now < closes_at``) the stack refuses to
scale web nodes below ``min_web`` or a lane's workers below ``min_workers[lane]``
(``stack/web/routes/scale.py``). The rule used to be a runbook line ("do not scale in
during exams"); lowering a pool minimum mid-exam then failed about 360 requests in two
minutes. Here the window lives in the ledger, next to the exam, so every web node
enforces the same lock and an override leaves an audit record.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, select

from stack.ledger.schema import exam_windows, exams

__all__ = ["ExamWindow", "LockViolation", "UnknownExam", "set_window", "windows", "open_windows", "violations"]


class UnknownExam(LookupError):
    """A window for an exam the ledger does not hold."""


@dataclass(frozen=True)
class ExamWindow:
    exam_code: str
    opens_at: float
    closes_at: float
    min_web: int
    min_workers: dict[str, int] = field(default_factory=dict)

    def is_open(self, now: float) -> bool:
        return self.opens_at <= now < self.closes_at

    def minimum(self, pool: str) -> int:
        return self.min_web if pool == "web" else self.min_workers.get(pool, 0)

    def describe(self) -> str:
        """``NOVA-101 (window 2026-11-30 09:00:00Z to 2026-11-30 11:00:00Z)``"""
        return f"{self.exam_code} (window {_utc(self.opens_at)} to {_utc(self.closes_at)})"

    def as_dict(self, now: float) -> dict[str, Any]:
        return {"exam_code": self.exam_code, "opens_at": self.opens_at, "closes_at": self.closes_at,
                "min_web": self.min_web, "min_workers": dict(self.min_workers), "open": self.is_open(now)}


@dataclass(frozen=True)
class LockViolation:
    window: ExamWindow
    pool: str
    requested: int

    @property
    def message(self) -> str:
        minimum = self.window.minimum(self.pool)
        return (f"exam {self.window.describe()} is open and needs {self.pool} >= {minimum}; "
                f"refusing {self.pool}={self.requested} (--force overrides and is audited)")

    def as_dict(self) -> dict[str, Any]:
        return {"exam_code": self.window.exam_code, "opens_at": self.window.opens_at,
                "closes_at": self.window.closes_at, "pool": self.pool, "requested": self.requested,
                "minimum": self.window.minimum(self.pool)}


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def set_window(conn: Connection, window: ExamWindow, now: float | None = None) -> None:
    """Store (or replace) the exam's window; raises UnknownExam for an exam not in the ledger."""
    if conn.execute(select(exams.c.code).where(exams.c.code == window.exam_code)).first() is None:
        raise UnknownExam(window.exam_code)
    values = {"opens_at": window.opens_at, "closes_at": window.closes_at, "min_web": window.min_web,
              "min_workers": json.dumps(window.min_workers, sort_keys=True),
              "updated_at": time.time() if now is None else now}
    updated = conn.execute(exam_windows.update().where(exam_windows.c.exam_code == window.exam_code).values(**values))
    if updated.rowcount == 0:
        conn.execute(exam_windows.insert().values(exam_code=window.exam_code, **values))


def windows(conn: Connection) -> list[ExamWindow]:
    rows = conn.execute(select(exam_windows).order_by(exam_windows.c.opens_at, exam_windows.c.exam_code))
    return [ExamWindow(r.exam_code, r.opens_at, r.closes_at, r.min_web, json.loads(r.min_workers)) for r in rows]


def open_windows(conn: Connection, now: float) -> list[ExamWindow]:
    return [w for w in windows(conn) if w.is_open(now)]


def violations(open_now: list[ExamWindow], pool: str, requested: int) -> list[LockViolation]:
    """The open windows that ``pool=requested`` would take below their minimum."""
    return [LockViolation(w, pool, requested) for w in open_now if requested < w.minimum(pool)]
