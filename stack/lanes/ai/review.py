"""The review queue of the AI lane and the operator actions on it (issue #11).

An item lands here when its retry deadline passes, when the provider calls its payload
invalid, or when a review replay fails: the outbox row is ``failed`` and a
``failed_for_review`` outcome holds its full record. ``replay`` hands it back to the
lane for exactly one more call (``replays`` counts them, every one audited); the job
sends it back here if that call fails. ``resume`` un-pauses the lane only after every
waiting row past its deadline has gone to review, so a resume never starts work the
deadline already ruled out.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, select, update

from stack.lanes.ai import billing, lanestate
from stack.lanes.ai.policy import RetryClock
from stack.ledger import outcomes
from stack.ledger.schema import outbox

__all__ = ["ReviewError", "list_review", "replay", "resume_lane"]


class ReviewError(LookupError):
    """An operator asked for something the review queue does not hold; the message says what."""


def list_review(conn: Connection) -> list[dict[str, Any]]:
    rows = conn.execute(select(outbox).where(outbox.c.kind == "narrative", outbox.c.status == "failed")
                        .order_by(outbox.c.created_at))
    items = []
    for row in rows:
        record = [o for o in outcomes.find(conn, row.operation_id) if o["status"] == "failed_for_review"]
        items.append({"operation_id": row.operation_id, "attempt_id": row.attempt_id, "accepted_at": row.created_at,
                      "last_error": row.last_error, "replays": row.replays,
                      "record": record[-1]["payload"] if record else None})
    return items


def replay(conn: Connection, op: str, actor: str, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    result = conn.execute(
        update(outbox).where(outbox.c.operation_id == op, outbox.c.kind == "narrative", outbox.c.status == "failed")
        .values(status="pending", not_before=None, replays=outbox.c.replays + 1, updated_at=now,
                last_error=f"review replay by {actor}")
    )
    if result.rowcount != 1:
        raise ReviewError(f"{op} is not in the review queue (only failed narrative rows can be replayed)")
    detail = {"operation_id": op, "pending_reservations": billing.pending_for(conn, op)}
    outcomes.audit(conn, actor, "review_replay", detail, now)
    return detail


def resume_lane(conn: Connection, lane: str, actor: str, time_scale: float, now: float | None = None) -> dict[str, Any]:
    """Deadlines first, then un-pause. Returns what went to review and whether the lane was paused."""
    now = time.time() if now is None else now
    deadline_of = RetryClock(time_scale).deadline
    waiting = [] if lane != "ai" else conn.execute(  # only narratives have a retry deadline
        select(outbox).where(outbox.c.kind == "narrative", outbox.c.status == "pending", outbox.c.replays == 0)
    ).fetchall()
    expired = [row for row in waiting if deadline_of(row.created_at) < now]
    for row in expired:
        reason = "retry deadline passed while the lane was paused"
        conn.execute(update(outbox).where(outbox.c.operation_id == row.operation_id, outbox.c.status == "pending")
                     .values(status="failed", last_error=reason, updated_at=now))
        detail = {"operation_id": row.operation_id, "reason": reason, "accepted_at": row.created_at}
        outcomes.write_failed_for_review(conn, row.operation_id, row.attempt_id, "narrative", detail, now)
        outcomes.audit(conn, actor, "failed_for_review", detail, now)
    resumed = lanestate.resume(conn, lane, actor, now)
    return {"lane": lane, "resumed": resumed, "to_review": [row.operation_id for row in expired]}
