"""Billing reservations: allowance reserved before each provider call, settled by what the
provider says (issue #11). A reservation is released only when the provider confirms the
call did not happen (a refusal, or a fresh effect answered under the same Idempotency-Key
to a later call); an answer we never heard leaves it pending until a look-up finds the
call or the next answer settles it (a look-up that finds nothing is not proof: the
provider may still be working on it). So at every moment
reservations = completed + released + pending, and completed matches the provider's own
ledger (``proctor audit billing``, chaos/checkers/billing.py)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, func, select, update

from stack.ledger.schema import ai_reservations

__all__ = ["STATES", "calls_made", "complete", "pending_for", "release", "reserve", "rows", "summary"]

STATES = ("pending", "completed", "released")


def reserve(conn: Connection, op: str, call_number: int, cost: float, now: float | None = None) -> str:
    call_id = f"{op}#{call_number}"
    conn.execute(ai_reservations.insert().values(call_id=call_id, operation_id=op, state="pending", cost=cost,
                                                 reserved_at=time.time() if now is None else now))
    return call_id


def _settle(conn: Connection, call_id: str, state: str, note: str, now: float | None) -> bool:
    result = conn.execute(
        update(ai_reservations).where(ai_reservations.c.call_id == call_id, ai_reservations.c.state == "pending")
        .values(state=state, note=note, settled_at=time.time() if now is None else now)
    )
    return result.rowcount == 1


def complete(conn: Connection, call_id: str, note: str = "provider answered", now: float | None = None) -> bool:
    return _settle(conn, call_id, "completed", note, now)


def release(conn: Connection, call_id: str, note: str, now: float | None = None) -> bool:
    """Only for a call the provider confirmed did not happen; ``note`` says how it confirmed."""
    return _settle(conn, call_id, "released", note, now)


def pending_for(conn: Connection, op: str) -> list[str]:
    result = conn.execute(select(ai_reservations.c.call_id).where(
        ai_reservations.c.operation_id == op, ai_reservations.c.state == "pending").order_by(ai_reservations.c.call_id))
    return list(result.scalars())


def calls_made(conn: Connection, op: str) -> int:
    return int(conn.execute(select(func.count()).where(ai_reservations.c.operation_id == op)).scalar_one())


def rows(conn: Connection) -> list[dict[str, Any]]:
    return [dict(row._mapping) for row in conn.execute(select(ai_reservations).order_by(ai_reservations.c.reserved_at))]


def summary(conn: Connection) -> dict[str, Any]:
    counts = dict.fromkeys(STATES, 0)
    costs = dict.fromkeys(STATES, 0.0)
    for state, count, cost in conn.execute(select(ai_reservations.c.state, func.count(), func.sum(ai_reservations.c.cost))
                                           .group_by(ai_reservations.c.state)):
        counts[state], costs[state] = int(count), float(cost or 0.0)
    return {"reservations": sum(counts.values()), **counts, "cost": costs}
