"""Provider limit: the provider never saw more than ``limit`` calls in any sliding window.

The window slides over the provider ledger's own arrival times (``started_at``; an
effect without one falls back to ``created_at`` with a note). Every call starts a
window ``[t, t + window)`` and the calls inside it are counted: a fixed-window limiter,
which allows up to 2 x limit across a window edge, fails this check where a fixed
count per clock-minute would not. Times are real seconds: ``window_seconds`` is one
case-minute at the run's time scale.

**over_limit**: one example per offending window (its start, its calls). No effects
at all is valid (nothing was over); an unread ledger is unknown.
"""

from __future__ import annotations

from typing import Any, Sequence

from chaos.checkers.base import Checker, Result, build_result
from chaos.history import Op
from chaos.ledgers import EffectRow, Ledgers

__all__ = ["NAME", "calls_over_limit", "provider_limit_checker"]

NAME = "provider_limit"


def calls_over_limit(times: Sequence[float], limit: int, window_seconds: float) -> list[dict[str, Any]]:
    """Each window ``[t, t + window)`` that starts at a call and holds more than ``limit`` calls."""
    ordered = sorted(times)
    over = []
    end = 0  # one past the last call inside the current window; only ever moves forward
    for start, at in enumerate(ordered):
        while end < len(ordered) and ordered[end] < at + window_seconds:
            end += 1
        if end - start > limit:
            over.append({"window_start": at, "calls": end - start, "limit": limit})
    return over


def _arrival(effect: EffectRow) -> float | None:
    return effect.started_at if effect.started_at is not None else effect.created_at


def provider_limit_checker(limit: int, window_seconds: float, table: str = "ai_effects") -> Checker:
    """A checker for one provider ledger at one limit; scenarios build it with their time scale."""
    if limit < 1 or window_seconds <= 0:
        raise ValueError(f"limit must be >= 1 and window_seconds > 0, not {limit} and {window_seconds}")

    def check_provider_limit(history: Sequence[Op], ledgers: Ledgers, options: object) -> Result:
        effects = getattr(ledgers, table)
        if effects is None:
            return Result.unknown(NAME, ledgers.missing(table))
        times = [at for at in map(_arrival, effects) if at is not None]
        notes = [f"{limit} calls per {window_seconds:g} s sliding window over {len(times)} calls"]
        if any(effect.started_at is None for effect in effects):
            notes.append("some effects have no started_at: their created_at was counted")
        untimed = [effect.operation_id for effect in effects if _arrival(effect) is None]
        result = build_result(NAME, bad={"over_limit": calls_over_limit(times, limit, window_seconds)},
                              info={"untimed": untimed}, notes=notes)
        if untimed and result.valid is True:
            result.valid = "unknown"
        return result

    return check_provider_limit
