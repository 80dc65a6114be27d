"""Calls while paused: the provider saw no new call while the AI lane was paused.

A pause window runs from a ``lane_pause`` to the next ``lane_resume`` (the stack's
audit log; an unclosed pause runs to the end). A call that was already in flight when
the pause began (its reservation is older than the pause) may still arrive inside the
window: that is causality, not a violation. **called_while_paused**: an effect whose
arrival (``started_at``) is inside a window and whose operation had no reservation
made before the window began.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from chaos.checkers.base import Result, build_result
from chaos.ledgers import EffectRow

__all__ = ["NAME", "calls_while_paused", "check_paused_calls", "pause_windows"]

NAME = "paused_calls"


def pause_windows(audit: Sequence[Mapping[str, Any]], lane: str = "ai") -> list[tuple[float, float]]:
    """[(paused_at, resumed_at or +inf)] from audit rows ``{at, action, detail: {lane}}``, oldest first."""
    windows: list[tuple[float, float]] = []
    paused_at: float | None = None
    for row in sorted(audit, key=lambda r: r["at"]):
        if (row.get("detail") or {}).get("lane") != lane:
            continue
        if row["action"] == "lane_pause" and paused_at is None:
            paused_at = row["at"]
        elif row["action"] == "lane_resume" and paused_at is not None:
            windows.append((paused_at, row["at"]))
            paused_at = None
    if paused_at is not None:
        windows.append((paused_at, float("inf")))
    return windows


def calls_while_paused(
    windows: Sequence[tuple[float, float]], effects: Sequence[EffectRow], reservations: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    reserved_at: dict[str, list[float]] = {}
    for row in reservations:
        reserved_at.setdefault(row["operation_id"], []).append(row["reserved_at"])
    found = []
    for effect in effects:
        arrived = effect.started_at if effect.started_at is not None else effect.created_at
        for start, end in windows:
            if arrived is not None and start <= arrived < end:
                in_flight = any(at < start for at in reserved_at.get(effect.operation_id, []))
                if not in_flight:
                    found.append({"operation_id": effect.operation_id, "arrived": arrived, "paused_at": start})
    return found


def check_paused_calls(
    audit: Sequence[Mapping[str, Any]] | None, effects: Sequence[EffectRow] | None,
    reservations: Sequence[Mapping[str, Any]] | None,
) -> Result:
    """The verdict over the stack's audit log, the provider's ledger and the reservations."""
    if audit is None or effects is None or reservations is None:
        tables = (("audit_log", audit), ("ai_effects", effects), ("ai_reservations", reservations))
        return Result.unknown(NAME, [f"ledger {name} was not read" for name, rows in tables if rows is None])
    windows = pause_windows(audit)
    return build_result(NAME, bad={"called_while_paused": calls_while_paused(windows, effects, reservations)},
                        counts={"pause_windows": len(windows)})
