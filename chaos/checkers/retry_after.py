"""Retry-After: an operation a provider refused with 429 did not come back before it was told to.

Judged for the AI provider and the SMS gateway alike. Each provider's export lists every refusal (arrival ``at``, ``operation_id``, status and
the exact ``retry_after_seconds``) beside its effects. **early_retry**: the same
operation arrived again (as a charged effect or as another refusal) after a 429 at ``t``
and before ``t + retry_after``. Only the same operation is judged: its next try is
necessarily decided after the lane heard the 429, so an early arrival is the lane's
choice, never a call that was already in flight (another operation's call may be).

A run without a 429 has nothing to check (valid, counts 0); a provider export without
the refusals list (older run folders) is unknown.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from chaos.checkers.base import Result, build_result
from chaos.history import Op
from chaos.ledgers import EffectRow, Ledgers, RefusalRow

__all__ = ["NAME", "PROVIDERS", "check_retry_after", "early_retries"]

NAME = "retry_after"
PROVIDERS = ("ai", "sms")


def early_retries(refusals: Sequence[RefusalRow], effects: Sequence[EffectRow]) -> list[dict[str, Any]]:
    arrivals: dict[str, list[float]] = defaultdict(list)
    for effect in effects:
        at = effect.started_at if effect.started_at is not None else effect.created_at
        if at is not None:
            arrivals[effect.operation_id].append(at)
    for refusal in refusals:
        arrivals[refusal.operation_id].append(refusal.at)
    early = []
    for refusal in refusals:
        if refusal.status != "429" or not refusal.retry_after_seconds:
            continue
        until = refusal.at + refusal.retry_after_seconds
        for at in sorted(arrivals[refusal.operation_id]):
            if refusal.at < at < until:
                early.append({"operation_id": refusal.operation_id, "refused_at": refusal.at,
                              "retry_after_seconds": refusal.retry_after_seconds, "arrived": at,
                              "early_by": round(until - at, 6)})
                break
    return early


def check_retry_after(history: Sequence[Op], ledgers: Ledgers, options: object) -> Result:
    """Both metered providers: the AI provider and the SMS gateway (the same classes, issue #11)."""
    tables = [f"{provider}_{part}" for provider in PROVIDERS for part in ("refusals", "effects")]
    if any(getattr(ledgers, table) is None for table in tables):
        return Result.unknown(NAME, ledgers.missing(*tables))
    early, counts = [], {}
    for provider in PROVIDERS:
        refusals, effects = getattr(ledgers, f"{provider}_refusals"), getattr(ledgers, f"{provider}_effects")
        early += [{"provider": provider, **row} for row in early_retries(refusals, effects)]
        counts[f"{provider}_refusals"] = len(refusals)
        counts[f"{provider}_with_retry_after"] = sum(1 for r in refusals if r.status == "429" and r.retry_after_seconds)
    result = build_result(NAME, bad={"early_retry": early}, counts=counts)
    if not any(counts[f"{provider}_with_retry_after"] for provider in PROVIDERS):
        result.notes.append("no 429 with Retry-After in this run: nothing to check")
    return result
