"""The lane alerts as Prometheus text (issue #11): the metric half of "raise an alert".

``proctor_alerts_total{lane,kind}`` counts the alert rows (``proctor alerts`` lists them)
and ``proctor_lane_paused{lane}`` is 1 while a lane is paused, so a dashboard or an
alert rule sees a credit or key problem without reading logs. Read from the ledger, so
every node reports the same numbers and a Valkey flush changes nothing.
"""

from __future__ import annotations

from sqlalchemy import Connection, func, select

from stack.ledger.schema import alerts, lane_state

__all__ = ["ALERT_LANES", "alert_metric_lines"]

ALERT_LANES = ("ai", "sms")
_KINDS = ("credit_exhausted", "key_revoked")


def alert_metric_lines(conn: Connection) -> list[str]:
    """Prometheus text lines; every lane and kind is present, zeros included."""
    counts = {(lane, kind): n for lane, kind, n in
              conn.execute(select(alerts.c.lane, alerts.c.kind, func.count()).group_by(alerts.c.lane, alerts.c.kind))}
    paused = {row.lane: bool(row.paused) for row in conn.execute(select(lane_state.c.lane, lane_state.c.paused))}
    kinds = sorted(set(_KINDS) | {kind for _, kind in counts})
    lines = ["# HELP proctor_alerts_total Alerts raised by a lane (credit exhausted, key revoked).",
             "# TYPE proctor_alerts_total counter"]
    lines += [f'proctor_alerts_total{{lane="{lane}",kind="{kind}"}} {counts.get((lane, kind), 0)}'
              for lane in ALERT_LANES for kind in kinds]
    lines += ["# HELP proctor_lane_paused 1 while the lane is paused (no provider calls until an operator resumes).",
              "# TYPE proctor_lane_paused gauge"]
    lines += [f'proctor_lane_paused{{lane="{lane}"}} {int(paused.get(lane, False))}' for lane in ALERT_LANES]
    return lines
