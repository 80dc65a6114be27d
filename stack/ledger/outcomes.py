"""Outcomes: the results students read (merit card, narrative, SMS receipt).

Write-once per operation is enforced by the database: a partial unique index
(``uq_outcome_ready``: one ``ready`` row per operation id) on SQLite and PostgreSQL.
``write_ready`` still checks first (the common replay costs no failed insert), and
inserts inside a savepoint, so losing a race to a concurrent job (PostgreSQL's read
committed lets both checks pass) rolls back only the insert and reads as "already
done", leaving the caller's transaction usable.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import Connection, bindparam, select
from sqlalchemy.exc import IntegrityError

from stack.ledger.prepared import Prepared
from stack.ledger.schema import audit_log, outcomes

__all__ = ["find", "ready_outcome", "write_ready", "write_failed_for_review", "audit"]


def _row(row: Any) -> dict[str, Any]:
    record = dict(row._mapping)
    record["payload"] = json.loads(record["payload"])
    return record


def find(conn: Connection, op: str) -> list[dict[str, Any]]:
    """Every outcome row of an operation, oldest first."""
    result = conn.execute(select(outcomes).where(outcomes.c.operation_id == op).order_by(outcomes.c.id))
    return [_row(row) for row in result]


def ready_outcome(conn: Connection, op: str) -> dict[str, Any] | None:
    result = conn.execute(
        select(outcomes).where(outcomes.c.operation_id == op, outcomes.c.status == "ready").order_by(outcomes.c.id)
    ).first()
    return None if result is None else _row(result)


def _insert(conn: Connection, op: str, attempt_id: str, kind: str, status: str, payload: dict[str, Any], now: float) -> None:
    conn.execute(
        outcomes.insert().values(
            operation_id=op,
            attempt_id=attempt_id,
            kind=kind,
            status=status,
            payload=json.dumps(payload, sort_keys=True),
            created_at=now,
        )
    )


def write_ready(
    conn: Connection, op: str, attempt_id: str, kind: str, payload: dict[str, Any], now: float | None = None
) -> bool:
    """Insert the ``ready`` outcome unless one exists. True if this call wrote it; False when
    one existed or a concurrent writer's committed first (the unique index said so)."""
    if ready_outcome(conn, op) is not None:
        return False
    try:
        with conn.begin_nested():
            _insert(conn, op, attempt_id, kind, "ready", payload, time.time() if now is None else now)
    except IntegrityError:
        if ready_outcome(conn, op) is None:
            raise  # not the write-once index (a foreign key, say): a real error
        return False
    return True


def write_failed_for_review(
    conn: Connection, op: str, attempt_id: str, kind: str, payload: dict[str, Any], now: float | None = None
) -> bool:
    """Record that the work gave up and needs a human; never over a ``ready`` outcome."""
    if ready_outcome(conn, op) is not None:
        return False
    existing = [row for row in find(conn, op) if row["status"] == "failed_for_review"]
    if existing:
        return False
    _insert(conn, op, attempt_id, kind, "failed_for_review", payload, time.time() if now is None else now)
    return True


_AUDIT = Prepared(audit_log.insert().values(at=bindparam("at"), actor=bindparam("actor"), action=bindparam("action"),
                                            detail=bindparam("detail")))
"""Compiled once (stack/ledger/prepared.py): every finish writes one under the ledger's write lock."""


def audit(conn: Connection, actor: str, action: str, detail: dict[str, Any], now: float | None = None) -> None:
    _AUDIT.run(conn, {"at": time.time() if now is None else now, "actor": actor, "action": action,
                      "detail": json.dumps(detail, sort_keys=True)})
