"""chaos/checkers/retry_after.py on hand-written provider exports: each failing export puts
its early retry after a valid one (a refusal honoured, another status skipped), so a scan
that stops too soon, or skips too much, misses it (mutation-scored, docs/checkers.md)."""

from __future__ import annotations

from typing import Any

from chaos.checkers.base import UNKNOWN
from chaos.checkers.retry_after import check_retry_after, early_retries
from chaos.ledgers import EffectRow, Ledgers, RefusalRow


def refused(op: str, at: float, retry_after: float | None = 1.0, status: str = "429") -> RefusalRow:
    return RefusalRow(operation_id=op, at=at, status=status, retry_after_seconds=retry_after)


def effect(op: str, started_at: float | None, created_at: float | None = None) -> EffectRow:
    return EffectRow(operation_id=op, created_at=created_at, started_at=started_at)


def early_ops(refusals: list[RefusalRow], effects: list[EffectRow]) -> list[tuple[str, float]]:
    return [(row["operation_id"], row["arrived"]) for row in early_retries(refusals, effects)]


def test_a_retry_at_or_after_its_retry_after_is_on_time_and_the_refusal_itself_is_not_a_retry() -> None:
    refusals = [refused("a", 10.0), refused("b", 10.0)]
    assert early_ops(refusals, [effect("a", 11.0), effect("b", 12.5)]) == []  # exactly at 10 + 1: on time


def test_an_early_retry_after_an_on_time_one_is_caught_once_with_how_early() -> None:
    refusals = [refused("a", 10.0), refused("b", 20.0, retry_after=1.2345678)]
    effects = [effect("a", 11.5), effect("b", 20.5), effect("b", 20.7)]  # b twice inside: one finding
    [row] = early_retries(refusals, effects)
    assert row == {"operation_id": "b", "refused_at": 20.0, "retry_after_seconds": 1.2345678, "arrived": 20.5,
                   "early_by": 0.734568}


def test_another_429_inside_the_wait_is_an_early_retry_too() -> None:
    refusals = [refused("a", 10.0), refused("b", 20.0), refused("b", 20.4)]
    assert early_ops(refusals, []) == [("b", 20.4)]


def test_only_a_429_with_a_retry_after_is_judged_and_the_scan_goes_on_past_the_others() -> None:
    refusals = [refused("a", 10.0, status="402"), refused("b", 10.0, retry_after=None), refused("c", 10.0, retry_after=0.0),
                refused("d", 10.0)]
    effects = [effect("a", 10.2), effect("b", 10.2), effect("c", 10.2), effect("d", 10.3)]
    assert early_ops(refusals, effects) == [("d", 10.3)]


def test_the_arrival_is_started_at_and_created_at_only_when_there_is_no_start() -> None:
    refusals = [refused("a", 10.0), refused("b", 20.0), refused("c", 30.0)]
    effects = [effect("a", 9.0, created_at=10.5),  # started before the refusal: not a retry
               effect("b", 20.5, created_at=25.0),  # started inside the wait: early, though it ended after
               effect("c", None, created_at=30.5), effect("c", None, None)]
    assert early_ops(refusals, effects) == [("b", 20.5), ("c", 30.5)]


def test_another_operation_may_arrive_inside_the_wait() -> None:
    assert early_ops([refused("a", 10.0)], [effect("b", 10.5), effect("a", 11.0)]) == []


def ledgers(ai_refusals: list[dict[str, Any]] | None, sms_refusals: list[dict[str, Any]] | None,
            ai_effects: list[dict[str, Any]] | None = None) -> Ledgers:
    return Ledgers.from_exports(ai_effects=ai_effects or [], ai_refusals=ai_refusals, sms_effects=[],
                                sms_refusals=sms_refusals)


def export(op: str, at: float, status: int = 429, retry_after: float | None = 1.0) -> dict[str, Any]:
    return {"operation_id": op, "at": at, "status": status, "retry_after_seconds": retry_after}


def test_the_verdict_counts_each_provider_and_names_the_one_that_retried_early() -> None:
    ai = [export("a", 10.0), export("b", 10.0, status=402, retry_after=None)]
    sms = [export("s", 10.0), export("s", 10.5)]
    result = check_retry_after([], ledgers(ai, sms, [{"operation_id": "a", "started_at": 11.0, "created_at": 11.5}]),
                               None)
    assert result.valid is False and result.violations == ["early_retry"]
    assert [(row["provider"], row["operation_id"]) for row in result.examples["early_retry"]] == [("sms", "s")]
    assert result.counts == {"early_retry": 1, "ai_refusals": 2, "ai_with_retry_after": 1, "sms_refusals": 2,
                             "sms_with_retry_after": 2}
    assert not any("nothing to check" in note for note in result.notes)


def test_an_sms_429_alone_is_something_to_check() -> None:
    result = check_retry_after([], ledgers([], [export("s", 10.0)]), None)
    assert result.valid is True and result.counts["sms_with_retry_after"] == 1
    assert not any("nothing to check" in note for note in result.notes)


def test_refusals_without_a_retry_after_leave_nothing_to_check() -> None:
    result = check_retry_after([], ledgers([export("a", 10.0, status=402, retry_after=None)], []), None)
    assert result.valid is True and any("nothing to check" in note for note in result.notes)


def test_only_a_429_that_carries_a_retry_after_counts_as_one() -> None:
    """A 503 that names a wait and a 429 that names none: neither is a 429 with Retry-After."""
    refusals = [export("a", 10.0, status=503, retry_after=2.0), export("b", 10.0, retry_after=None)]
    result = check_retry_after([], ledgers(refusals, []), None)
    assert result.counts["ai_refusals"] == 2 and result.counts["ai_with_retry_after"] == 0
    assert any("nothing to check" in note for note in result.notes)


def test_a_missing_refusal_list_of_either_provider_is_unknown() -> None:
    for ai, sms in (([], None), (None, [])):
        result = check_retry_after([], ledgers(ai, sms), None)
        assert result.valid == UNKNOWN, (ai, sms)
