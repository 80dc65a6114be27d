"""Outbox rows: every piece of work a finished attempt owes, and its state.

The web node creates rows and records its best-effort enqueue; the relay moves
pending rows to enqueued and reconciles enqueued rows; a job marks its row done
in the transaction that writes the outcome (see docs/architecture.md).
Transitions out of ``enqueued`` compare the recorded ``job_id`` so a stale
observation (the relay looked at an older job) can never move a newer enqueue.
"""

from __future__ import annotations

import time

from sqlalchemy import Connection, func, select, update

from stack.lanes.queues import operation_id
from stack.ledger.schema import OUTBOX_KINDS, outbox

__all__ = [
    "create_rows",
    "rows_for_attempt",
    "mark_enqueued",
    "get_row",
    "rows_with_status",
    "mark_done",
    "mark_reenqueued",
    "mark_failed",
    "pending_for_attempt",
    "unfinished_summary",
    "NON_FINAL_STATUSES",
]

NON_FINAL_STATUSES = ("pending", "enqueued")
"""Rows whose outcome the student is still waiting for."""


def create_rows(conn: Connection, attempt_id: str, now: float | None = None) -> list[str]:
    """Insert one pending row per kind; call inside the transaction that finishes the attempt."""
    now = time.time() if now is None else now
    ids = [operation_id(kind, attempt_id) for kind in OUTBOX_KINDS]
    conn.execute(
        outbox.insert(),
        [
            {
                "operation_id": op,
                "attempt_id": attempt_id,
                "kind": kind,
                "status": "pending",
                "attempts": 0,
                "created_at": now,
                "updated_at": now,
            }
            for op, kind in zip(ids, OUTBOX_KINDS)
        ],
    )
    return ids


def rows_for_attempt(conn: Connection, attempt_id: str) -> list[dict]:
    result = conn.execute(select(outbox).where(outbox.c.attempt_id == attempt_id))
    return [dict(row._mapping) for row in result]


def mark_enqueued(conn: Connection, op: str, enqueue_number: int, job: str, now: float | None = None) -> bool:
    """Record an enqueue; only moves pending/enqueued rows (a done row stays done). True if moved."""
    now = time.time() if now is None else now
    result = conn.execute(
        update(outbox)
        .where(outbox.c.operation_id == op, outbox.c.status.in_(("pending", "enqueued")))
        .values(status="enqueued", attempts=enqueue_number, job_id=job, enqueued_at=now, updated_at=now)
    )
    return result.rowcount == 1


def get_row(conn: Connection, op: str) -> dict | None:
    row = conn.execute(select(outbox).where(outbox.c.operation_id == op)).first()
    return None if row is None else dict(row._mapping)


def rows_with_status(conn: Connection, status: str, limit: int = 500) -> list[dict]:
    """Oldest first, so a backlog drains in finish order."""
    result = conn.execute(
        select(outbox).where(outbox.c.status == status).order_by(outbox.c.created_at, outbox.c.operation_id).limit(limit)
    )
    return [dict(row._mapping) for row in result]


def mark_done(conn: Connection, op: str, now: float | None = None) -> bool:
    """The outcome is written (same transaction). Any other state yields to the outcome: it is the truth."""
    now = time.time() if now is None else now
    result = conn.execute(
        update(outbox)
        .where(outbox.c.operation_id == op, outbox.c.status != "done")
        .values(status="done", done_at=now, updated_at=now)
    )
    return result.rowcount == 1


def mark_reenqueued(
    conn: Connection, op: str, previous_job: str, enqueue_number: int, job: str, reason: str, now: float | None = None
) -> bool:
    """Move an enqueued row to a fresh job, only if it still points at ``previous_job``."""
    now = time.time() if now is None else now
    result = conn.execute(
        update(outbox)
        .where(outbox.c.operation_id == op, outbox.c.status == "enqueued", outbox.c.job_id == previous_job)
        .values(attempts=enqueue_number, job_id=job, enqueued_at=now, updated_at=now, last_error=reason)
    )
    return result.rowcount == 1


def mark_failed(conn: Connection, op: str, previous_job: str, reason: str, now: float | None = None) -> bool:
    """Give up on an enqueued row (max attempts); the caller writes the failed_for_review outcome."""
    now = time.time() if now is None else now
    result = conn.execute(
        update(outbox)
        .where(outbox.c.operation_id == op, outbox.c.status == "enqueued", outbox.c.job_id == previous_job)
        .values(status="failed", updated_at=now, last_error=reason)
    )
    return result.rowcount == 1


def pending_for_attempt(conn: Connection, attempt_id: str) -> list[dict]:
    """Rows of the attempt not yet handed to Valkey, in kind order (merit first: it is urgent)."""
    result = conn.execute(select(outbox).where(outbox.c.attempt_id == attempt_id, outbox.c.status == "pending"))
    rows = [dict(row._mapping) for row in result]
    return sorted(rows, key=lambda r: OUTBOX_KINDS.index(r["kind"]))


def unfinished_summary(conn: Connection) -> tuple[int, float | None]:
    """(rows still owed, created_at of the oldest of them): pending outcomes and outbox lag."""
    count, oldest = conn.execute(
        select(func.count(), func.min(outbox.c.created_at)).where(outbox.c.status.in_(NON_FINAL_STATUSES))
    ).one()
    return int(count), oldest
