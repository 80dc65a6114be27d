"""Outbox rows: every piece of work a finished attempt owes, and its state.

Only the functions the web node needs at finish time live here so far; the relay
and the jobs add the transitions they own (see docs/architecture.md).
"""

from __future__ import annotations

import time

from sqlalchemy import Connection, select, update

from stack.lanes.queues import operation_id
from stack.ledger.schema import OUTBOX_KINDS, outbox

__all__ = ["create_rows", "rows_for_attempt", "mark_enqueued"]


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
