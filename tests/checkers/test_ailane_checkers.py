"""The AI lane's checkers (issue #11) on hand-written ledgers; every anomaly comes after valid calls."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checkers import CheckOptions
from chaos.checkers.billing import check_billing
from chaos.checkers.duplicate_charges import check_duplicate_charges
from chaos.checkers.paused_calls import calls_while_paused, check_paused_calls, pause_windows
from chaos.checkers.provider_limit import calls_over_limit, provider_limit_checker
from chaos.ledgers import EffectRow, Ledgers

LIMIT, WINDOW = 8, 60.0


def effect(op: str, at: float, cost: float = 1.0) -> EffectRow:
    return EffectRow(operation_id=op, started_at=at, created_at=at + 10, cost=cost)


def spaced(n: int, start: float = 0.0, gap: float = 7.5) -> list[EffectRow]:
    """n calls paced exactly at the limit: 8 per 60 s."""
    return [effect(f"narrative-p{i}", start + i * gap) for i in range(n)]


def limit_verdict(effects: list[EffectRow]) -> Any:
    return provider_limit_checker(LIMIT, WINDOW)([], Ledgers(ai_effects=tuple(effects)), CheckOptions())


def test_calls_paced_at_the_limit_pass() -> None:
    result = limit_verdict(spaced(40))
    assert (result.valid, result.counts["over_limit"]) == (True, 0)


def test_a_burst_across_a_fixed_window_edge_fails_the_sliding_window() -> None:
    # Valid pacing first; then what a fixed per-minute limiter allows: 8 calls at 290-298 s
    # (minute 4) and 8 more at 300-308 s (minute 5): 16 inside one sliding minute.
    calls = spaced(30) + [effect(f"narrative-e{i}", 590 + i) for i in range(8)]
    calls += [effect(f"narrative-f{i}", 600 + i) for i in range(8)]
    per_fixed_minute = max(sum(1 for c in calls if int(c.started_at // 60) == m) for m in range(11))  # type: ignore[operator]
    assert per_fixed_minute == LIMIT  # a fixed-window limiter was satisfied...
    result = limit_verdict(calls)
    assert result.valid is False and result.violations == ["over_limit"]  # ...the sliding window is not
    assert result.examples["over_limit"][0] == {"window_start": 590.0, "calls": 16, "limit": LIMIT}


def test_exactly_the_limit_in_a_window_passes_and_one_more_fails() -> None:
    assert calls_over_limit([0.0] * 8, LIMIT, WINDOW) == []
    assert calls_over_limit([0.0] * 8 + [59.999], LIMIT, WINDOW)[0]["calls"] == 9
    assert calls_over_limit([0.0] * 8 + [60.0], LIMIT, WINDOW) == []  # the window is half-open


def test_limit_checker_is_unknown_without_the_ledger_and_refuses_bad_limits() -> None:
    assert provider_limit_checker(LIMIT, WINDOW)([], Ledgers(), CheckOptions()).valid == "unknown"
    for limit, window in ((0, WINDOW), (LIMIT, 0.0)):
        with pytest.raises(ValueError, match="limit"):
            provider_limit_checker(limit, window)
    assert callable(provider_limit_checker(1, 0.5))  # the smallest sensible limit and a sub-second window


def test_limit_checker_notes_only_what_it_had_to_assume() -> None:
    assert not any("created_at" in note for note in limit_verdict(spaced(3)).notes)
    untimed = limit_verdict(spaced(3) + [EffectRow(operation_id="narrative-u")])
    assert untimed.valid == "unknown" and untimed.examples["untimed"] == ["narrative-u"]


def test_limit_checker_falls_back_to_created_at_with_a_note() -> None:
    result = limit_verdict([EffectRow(operation_id="narrative-x", created_at=1.0)])
    assert result.valid is True and any("created_at" in note for note in result.notes)


def test_duplicate_charge_after_single_charges_fails() -> None:
    calls = spaced(5) + [effect("narrative-p2", 200.0, cost=1.5)]
    result = check_duplicate_charges([], Ledgers(ai_effects=tuple(calls)), CheckOptions())
    assert result.valid is False
    assert result.examples["duplicate_charges"] == [{"operation_id": "narrative-p2", "effects": 2, "cost": 2.5}]
    assert check_duplicate_charges([], Ledgers(ai_effects=tuple(spaced(5))), CheckOptions()).valid is True
    assert check_duplicate_charges([], Ledgers(), CheckOptions()).valid == "unknown"


def reservation(op: str, n: int, state: str, at: float = 0.0) -> dict[str, Any]:
    return {"call_id": f"{op}#{n}", "operation_id": op, "state": state, "reserved_at": at}


def good_billing() -> tuple[list[dict[str, Any]], list[EffectRow]]:
    effects = spaced(3)
    reservations = [reservation(e.operation_id, 1, "completed") for e in effects]
    reservations += [reservation("narrative-p0", 2, "released"), reservation("narrative-q", 1, "pending")]
    return reservations, effects


def test_billing_equation_holds_for_settled_and_pending_reservations() -> None:
    result = check_billing(*good_billing())
    assert result.valid is True
    assert {k: result.counts[k] for k in ("reservations", "completed", "released", "pending", "charges")} == {
        "reservations": 5, "completed": 3, "released": 1, "pending": 1, "charges": 3}
    assert result.examples["pending_at_end"] == ["narrative-q#1"]


@pytest.mark.parametrize("category, change", [
    ("unreserved_charge", lambda r, e: (r, e + [effect("narrative-z", 300.0)])),
    ("released_but_charged", lambda r, e: (r + [reservation("narrative-y", 1, "released")],
                                           e + [effect("narrative-y", 300.0)])),
    ("completed_without_charge", lambda r, e: (r + [reservation("narrative-w", 1, "completed")], e)),
    ("bad_state", lambda r, e: (r + [reservation("narrative-v", 1, "refunded")], e)),
])
def test_billing_anomaly_after_valid_rows_fails(category: str, change: Any) -> None:
    result = check_billing(*change(*good_billing()))
    assert result.valid is False and result.violations == [category]


def test_a_bad_state_row_does_not_hide_the_rows_after_it() -> None:
    reservations, effects = good_billing()
    result = check_billing([reservation("narrative-v", 1, "refunded")] + reservations, effects)
    assert result.violations == ["bad_state"] and result.counts["completed"] == 3


def test_billing_is_unknown_without_both_ledgers() -> None:
    assert check_billing(None, []).valid == "unknown"
    assert check_billing([], None).notes == ["ledger ai_effects was not read"]


def audit_row(at: float, action: str, lane: str = "ai") -> dict[str, Any]:
    return {"at": at, "action": action, "detail": {"lane": lane}}


AUDIT = [audit_row(100.0, "lane_pause"), audit_row(150.0, "lane_pause", lane="sms"), audit_row(200.0, "lane_resume"),
         audit_row(300.0, "lane_pause")]


def test_pause_windows_pair_pause_and_resume_per_lane_and_leave_the_last_open() -> None:
    assert pause_windows(AUDIT) == [(100.0, 200.0), (300.0, float("inf"))]
    stray = [audit_row(50.0, "lane_resume"), audit_row(100.0, "lane_pause"), audit_row(120.0, "lane_pause"),
             audit_row(200.0, "lane_resume"), audit_row(250.0, "lane_resume")]
    assert pause_windows(stray) == [(100.0, 200.0)]  # a resume while running and a second pause change nothing


def test_window_edges_a_pause_includes_its_start_and_a_reservation_at_the_start_is_new() -> None:
    windows = [(100.0, 200.0)]
    at_start = [effect("narrative-s", 100.0)]
    assert calls_while_paused(windows, at_start, [reservation("narrative-s", 1, "completed", 100.0)])
    assert not calls_while_paused(windows, at_start, [reservation("narrative-s", 1, "completed", 99.9)])
    assert not calls_while_paused(windows, [effect("narrative-e", 200.0)], [])  # resumed at 200: allowed


def test_calls_outside_pauses_and_calls_already_in_flight_pass() -> None:
    effects = [effect("narrative-a", 50.0), effect("narrative-b", 101.0), effect("narrative-c", 250.0)]
    reservations = [reservation("narrative-a", 1, "completed", 49.0), reservation("narrative-b", 1, "completed", 99.0),
                    reservation("narrative-c", 1, "completed", 249.0)]
    result = check_paused_calls(AUDIT, effects, reservations)
    assert (result.valid, result.counts["pause_windows"]) == (True, 2)


def test_a_new_call_while_paused_fails() -> None:
    effects = [effect("narrative-a", 50.0), effect("narrative-d", 320.0)]
    reservations = [reservation("narrative-a", 1, "completed", 49.0), reservation("narrative-d", 1, "completed", 310.0)]
    result = check_paused_calls(AUDIT, effects, reservations)
    assert result.valid is False
    assert result.examples["called_while_paused"] == [{"operation_id": "narrative-d", "arrived": 320.0, "paused_at": 300.0}]
    for missing in range(3):
        tables: list[Any] = [AUDIT, effects, reservations]
        tables[missing] = None
        assert check_paused_calls(*tables).valid == "unknown"
    assert check_paused_calls(None, effects, reservations).notes == ["ledger audit_log was not read"]


def test_a_call_made_while_the_invoice_was_read_is_covered_by_the_later_read() -> None:
    """The lane was still calling during the final read: reserved after the first read of the
    reservations, charged before the invoice was read; the read after the invoice holds it."""
    reservations, effects = good_billing()
    late = effect("narrative-late", 300.0)
    after = reservations + [reservation("narrative-late", 1, "pending")]
    result = check_billing(reservations, effects + [late], after)
    assert result.valid is True and "narrative-late#1" in result.examples["pending_at_end"]
    # Control: with no reservation in either read the same charge is unreserved.
    assert check_billing(reservations, effects + [late], reservations).violations == ["unreserved_charge"]


def test_completed_without_charge_is_judged_on_the_read_before_the_invoice() -> None:
    """Completed only after the invoice was read: its charge may be later than the invoice, no breach;
    completed before the invoice was read yet not on it: a breach."""
    reservations, effects = good_billing()
    pending_then_completed = reservations + [reservation("narrative-c", 1, "pending")]
    completed_later = reservations + [reservation("narrative-c", 1, "completed")]
    assert check_billing(pending_then_completed, effects, completed_later).valid is True
    assert check_billing(completed_later, effects, completed_later).violations == ["completed_without_charge"]
