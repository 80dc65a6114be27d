"""Lane pause and alerts, kept in the ledger so a Valkey flush never un-pauses a lane.

A credit or auth problem pauses the lane (no further provider calls) and raises an
alert: a row here (``proctor alerts``), an ERROR log line and ``proctor_alerts_total`` on /metrics
(``alert_samples``: ``proctor_alerts_total{lane,kind}`` and ``proctor_lane_paused{lane}``,
read from the ledger, so every node reports the same and a Valkey flush changes nothing).
Only an operator resumes (``proctor lane resume ai``); resuming first sends every row
past its deadline to review (``stack/lanes/ai/review.py``).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from sqlalchemy import Connection, func, select

from stack.ledger.outcomes import audit
from stack.ledger.schema import alerts, lane_state

__all__ = ["ALERT_LANES", "alert_samples", "is_paused", "list_alerts", "pause", "raise_alert", "resume", "state"]

log = logging.getLogger("proctor.lane")


def state(conn: Connection, lane: str) -> dict[str, Any]:
    row = conn.execute(select(lane_state).where(lane_state.c.lane == lane)).first()
    if row is None:
        return {"lane": lane, "paused": False, "reason": None, "since": None}
    return {**dict(row._mapping), "paused": bool(row.paused)}


def is_paused(conn: Connection, lane: str) -> bool:
    return state(conn, lane)["paused"]


def _set(conn: Connection, lane: str, paused: bool, reason: str, now: float) -> bool:
    """True if the state changed."""
    if is_paused(conn, lane) == paused:
        return False
    conn.execute(lane_state.delete().where(lane_state.c.lane == lane))
    conn.execute(lane_state.insert().values(lane=lane, paused=int(paused), reason=reason, since=now))
    return True


def pause(conn: Connection, lane: str, reason: str, actor: str, now: float | None = None) -> bool:
    now = time.time() if now is None else now
    changed = _set(conn, lane, True, reason, now)
    if changed:
        audit(conn, actor, "lane_pause", {"lane": lane, "reason": reason}, now)
    return changed


def resume(conn: Connection, lane: str, actor: str, now: float | None = None) -> bool:
    now = time.time() if now is None else now
    changed = _set(conn, lane, False, f"resumed by {actor}", now)
    if changed:
        audit(conn, actor, "lane_resume", {"lane": lane}, now)
    return changed


def raise_alert(conn: Connection, lane: str, kind: str, detail: dict[str, Any], now: float | None = None) -> None:
    conn.execute(alerts.insert().values(at=time.time() if now is None else now, lane=lane, kind=kind,
                                        detail=json.dumps(detail, sort_keys=True)))
    log.error("ALERT lane=%s kind=%s %s", lane, kind, json.dumps(detail, sort_keys=True))


def list_alerts(conn: Connection) -> list[dict[str, Any]]:
    return [{**dict(row._mapping), "detail": json.loads(row.detail)}
            for row in conn.execute(select(alerts).order_by(alerts.c.id))]


ALERT_LANES = ("ai", "sms")
_KINDS = ("credit_exhausted", "key_revoked")


def alert_samples(conn: Connection) -> tuple[list[tuple[tuple[str, str], int]], list[tuple[tuple[str], int]]]:
    """(alerts per (lane, kind), paused per lane) for /metrics; every lane and kind is present, zeros included."""
    counts = {(lane, kind): n for lane, kind, n in
              conn.execute(select(alerts.c.lane, alerts.c.kind, func.count()).group_by(alerts.c.lane, alerts.c.kind))}
    paused = {row.lane: bool(row.paused) for row in conn.execute(select(lane_state.c.lane, lane_state.c.paused))}
    kinds = sorted(set(_KINDS) | {kind for _, kind in counts})
    alert_counts = [((lane, kind), counts.get((lane, kind), 0)) for lane in ALERT_LANES for kind in kinds]
    return alert_counts, [((lane,), int(paused.get(lane, False))) for lane in ALERT_LANES]
