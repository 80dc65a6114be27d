"""The AI lane's checkers wired into every run: exports -> run folder -> run_checkers.

The stack's export of reservations, audit log, alerts and lane state is read back in the
export format; then each checker is judged through ``run_checkers`` (the path every run
takes), with a negative control per checker where the anomaly comes after valid calls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.checkers import run_checkers
from chaos.checkers.ailane import AI_CALLS_PER_CASE_MINUTE
from chaos.checkers import CheckOptions
from chaos.checkers.base import UNKNOWN, OptionsError
from chaos.ledgers import AlertRow, Ledgers, ReservationRow, load_ledgers
from stack.lanes.ai import billing, lanestate
from stack.config import CASE_PROVIDER_CALLS_PER_MINUTE, Settings
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.exports import export_rows

AI = ("provider_limit", "duplicate_charges", "billing", "paused_calls")
SCALE = 0.01  # one case-minute = 0.6 s


def effect(op: str, at: float) -> dict[str, Any]:
    return {"operation_id": op, "started_at": at, "created_at": at + 0.1, "cost": 1.0}


def reservation(op: str, at: float, state: str = "completed", n: int = 1) -> dict[str, Any]:
    return {"call_id": f"{op}#{n}", "operation_id": op, "state": state, "cost": 1.0, "reserved_at": at}


def paced(n: int, gap: float = 0.08) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """n calls at 7.5 case-seconds apart (exactly the limit at SCALE), each reserved and completed."""
    ops = [f"narrative-a{i}" for i in range(n)]
    return ([effect(op, 100 + i * gap) for i, op in enumerate(ops)],
            [reservation(op, 100 + i * gap - 0.01) for i, op in enumerate(ops)])


def ai_ledgers(effects: list[dict[str, Any]], reservations: list[dict[str, Any]],
               audit: list[dict[str, Any]] | None = None, alerts: list[dict[str, Any]] | None = None) -> Ledgers:
    return Ledgers.from_exports(ai_effects=effects, ai_reservations=reservations, audit_log=audit or [],
                                alerts=alerts or [], lane_state=[])


def verdicts(ledgers: Ledgers, time_scale: float | None = SCALE) -> dict[str, Any]:
    result = run_checkers([], ledgers, CheckOptions(time_scale=time_scale))
    return {name: result.checks[name] for name in AI}


def test_the_limit_mirrors_the_stack() -> None:
    assert AI_CALLS_PER_CASE_MINUTE == CASE_PROVIDER_CALLS_PER_MINUTE


def test_a_run_without_ai_calls_is_valid_with_nothing_to_check() -> None:
    checks = verdicts(ai_ledgers([], []))
    assert {name: check.valid for name, check in checks.items()} == dict.fromkeys(AI, True)
    assert any("nothing to check" in note for note in checks["provider_limit"].notes)
    assert checks["billing"].counts["reservations"] == 0


def test_unread_ai_tables_make_the_ai_checkers_unknown() -> None:
    checks = verdicts(Ledgers.from_exports(ai_effects=paced(3)[0]))
    assert checks["billing"].valid == UNKNOWN and checks["paused_calls"].valid == UNKNOWN
    assert checks["provider_limit"].valid is True and checks["duplicate_charges"].valid is True


def test_paced_calls_with_a_pause_and_no_call_inside_it_are_valid() -> None:
    effects, reservations = paced(24)
    audit = [{"at": 103.0, "action": "lane_pause", "actor": "ai-lane", "detail": {"lane": "ai"}},
             {"at": 104.0, "action": "lane_resume", "actor": "operator", "detail": {"lane": "ai"}}]
    alert = [{"at": 103.0, "lane": "ai", "kind": "credit_exhausted", "detail": {}}]
    checks = verdicts(ai_ledgers(effects, reservations, audit, alert))
    assert {name: check.valid for name, check in checks.items()} == dict.fromkeys(AI, True)
    assert checks["provider_limit"].details["window_seconds"] == pytest.approx(60 * SCALE)
    assert checks["paused_calls"].counts["alerts"] == 1 and checks["paused_calls"].counts["pause_windows"] == 1


def test_a_burst_after_paced_calls_is_over_the_limit_at_the_declared_scale() -> None:
    effects, reservations = paced(16)
    burst = [f"narrative-b{i}" for i in range(9)]
    effects += [effect(op, 102 + i * 0.01) for i, op in enumerate(burst)]
    reservations += [reservation(op, 101.9) for op in burst]
    assert verdicts(ai_ledgers(effects, reservations))["provider_limit"].valid is False
    # calls paced for SCALE crowd one case-minute at a 10x slower clock: the declared scale is what counts
    assert verdicts(ai_ledgers(paced(16)[0], paced(16)[1]), time_scale=SCALE * 10)["provider_limit"].valid is False


def test_ai_calls_without_a_declared_time_scale_are_unknown() -> None:
    check = verdicts(ai_ledgers(*paced(5)), time_scale=None)["provider_limit"]
    assert check.valid == UNKNOWN and "time_scale" in check.notes[0]


def test_a_second_charge_after_valid_calls_is_a_duplicate_and_unbilled() -> None:
    effects, reservations = paced(6)
    effects.append(effect("narrative-a0", 101.0))  # charged again, no second reservation
    checks = verdicts(ai_ledgers(effects, reservations))
    assert checks["duplicate_charges"].valid is False
    assert checks["billing"].valid is False and checks["billing"].violations == ["unreserved_charge"]


def test_a_release_the_provider_did_not_confirm_is_released_but_charged() -> None:
    effects, reservations = paced(6)
    reservations[-1]["state"] = "released"
    check = verdicts(ai_ledgers(effects, reservations))["billing"]
    assert check.valid is False and check.violations == ["released_but_charged"]


def test_a_new_call_inside_a_pause_is_caught() -> None:
    effects, reservations = paced(6)
    audit = [{"at": 101.0, "action": "lane_pause", "actor": "ai-lane", "detail": {"lane": "ai"}}]
    effects.append(effect("narrative-late", 101.5))
    reservations.append(reservation("narrative-late", 101.4))  # reserved after the pause began
    check = verdicts(ai_ledgers(effects, reservations, audit))["paused_calls"]
    assert check.valid is False and check.violations == ["called_while_paused"]


def test_time_scale_comes_from_scenario_json() -> None:
    assert CheckOptions.from_scenario({"time_scale": 0.02}).time_scale == 0.02
    assert CheckOptions.from_scenario({"settings": {"TIME_SCALE": "0.5"}}).time_scale == 0.5
    assert CheckOptions.from_scenario({}).time_scale is None
    with pytest.raises(OptionsError, match="time_scale"):
        CheckOptions.from_scenario({"time_scale": 0})


def test_the_stack_exports_round_trip_into_the_run_folder(tmp_path: Path) -> None:
    settings = Settings(run_dir=tmp_path, time_scale=SCALE)
    engine = make_engine(settings)
    init_ledger(engine, settings)
    with engine.begin() as conn:
        billing.reserve(conn, "narrative-a1", 1, 1.0, now=100.0)
        lanestate.pause(conn, "ai", "provider answered 402", actor="ai-lane", now=101.0)
        lanestate.raise_alert(conn, "ai", "credit_exhausted", {"status": 402}, now=101.0)
        folder = tmp_path / "run" / "ledgers"
        folder.mkdir(parents=True)
        for table in ("ai_reservations", "audit_log", "alerts", "lane_state"):
            document = {"table": table, "exported_at": 200.0, "rows": export_rows(conn, table)}
            (folder / f"{table}.json").write_text(json.dumps(document))
        (folder / "ai_effects.json").write_text(json.dumps({"provider": "ai", "effects": []}))
    ledgers = load_ledgers(tmp_path / "run")
    assert ledgers.ai_reservations == (ReservationRow("narrative-a1#1", "narrative-a1", "pending", 1.0, 100.0),)
    assert [(row.action, row.detail["lane"]) for row in ledgers.audit_log or ()] == [("lane_pause", "ai")]
    assert ledgers.alerts == (AlertRow("ai", "credit_exhausted", 101.0, 1, {"status": 402}),)
    assert ledgers.lane_state is not None and ledgers.lane_state[0].paused is True
    check = verdicts(ledgers)["paused_calls"]
    assert check.valid is True  # judged, not unknown: every table was read (the call never reached the provider)
    assert any("still paused" in note for note in check.notes)


def _status_error(code: int) -> Exception:
    import httpx

    request = httpx.Request("GET", "http://127.0.0.1/admin/export/x")
    return httpx.HTTPStatusError(f"{code}", request=request, response=httpx.Response(code, request=request))


@pytest.mark.parametrize("code, excused", [(422, True), (404, True), (500, False)])
def test_a_deployment_without_the_ai_exports_leaves_them_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 code: int, excused: bool) -> None:
    import chaos.snapshot as snapshot

    def fetch(url: str, token: str, table: str, timeout: float = 30.0) -> dict[str, Any]:
        if table in snapshot.AI_LANE_TABLES:
            raise _status_error(code)
        return {"table": table, "exported_at": 1.0, "rows": []}

    monkeypatch.setattr(snapshot, "fetch_table", fetch)
    monkeypatch.setattr(snapshot, "fetch_queues", lambda url, token: (_ for _ in ()).throw(_status_error(404)))
    if not excused:  # a failing export is a failed final read, never a quietly missing table
        with pytest.raises(Exception, match=str(code)):
            snapshot.snapshot_ledgers("http://127.0.0.1:1", {}, "t", tmp_path)
        return
    counts = snapshot.snapshot_ledgers("http://127.0.0.1:1", {}, "t", tmp_path / "ledgers")
    assert set(counts) == set(snapshot.STACK_TABLES)
    ledgers = load_ledgers(tmp_path)
    assert ledgers.attempts == () and ledgers.ai_reservations is None
    assert ledgers.problems["ai_reservations"].endswith("ai_reservations.json does not exist")


def refusal(op: str, at: float, retry_after: float | None = 0.5, status: int = 429) -> dict[str, Any]:
    return {"operation_id": op, "at": at, "status": status, "retry_after_seconds": retry_after}


def retry_verdict(effects: list[dict[str, Any]], refusals: list[dict[str, Any]]) -> Any:
    ledgers = Ledgers.from_exports(ai_effects=effects, ai_refusals={"provider": "ai", "effects": effects,
                                                                    "refusals": refusals},
                                   sms_effects=[], sms_refusals=[])
    return run_checkers([], ledgers, CheckOptions(time_scale=SCALE)).checks["retry_after"]


def test_retries_after_their_retry_after_are_valid() -> None:
    effects, _ = paced(6)
    refusals = [refusal("narrative-a3", 99.0), refusal("narrative-a4", 99.2, status=402)]
    check = retry_verdict(effects, refusals)  # a3 came back at 100.24, after 99.5; another op may arrive any time
    assert check.valid is True
    assert check.counts == {"early_retry": 0, "ai_refusals": 2, "ai_with_retry_after": 1, "sms_refusals": 0,
                            "sms_with_retry_after": 0}


def test_a_retry_of_the_same_operation_before_its_retry_after_is_caught() -> None:
    effects, _ = paced(6)
    refusals = [refusal("narrative-a3", 99.0), refusal("narrative-a5", 100.1, retry_after=0.5)]  # a5 back at 100.4
    check = retry_verdict(effects, refusals)
    assert check.valid is False and check.violations == ["early_retry"]
    assert check.examples["early_retry"][0]["operation_id"] == "narrative-a5"
    assert check.examples["early_retry"][0]["provider"] == "ai"


def test_an_early_sms_retry_is_caught_too() -> None:
    sms = [effect("sms-a1", 100.0), effect("sms-a2", 100.2)]
    ledgers = Ledgers.from_exports(ai_effects=[], ai_refusals=[], sms_effects=sms,
                                   sms_refusals=[refusal("sms-a1", 99.5, retry_after=1.0)])
    check = run_checkers([], ledgers, CheckOptions(time_scale=SCALE)).checks["retry_after"]
    assert check.valid is False and check.examples["early_retry"][0]["provider"] == "sms"


def test_no_429_is_valid_with_nothing_to_check_and_no_refusal_list_is_unknown() -> None:
    check = retry_verdict(paced(3)[0], [])
    assert check.valid is True and any("nothing to check" in note for note in check.notes)
    old_export = run_checkers([], Ledgers.from_exports(ai_effects=paced(3)[0], sms_effects=[]),
                              CheckOptions(time_scale=SCALE))
    assert old_export.checks["retry_after"].valid == UNKNOWN


def test_the_provider_export_holds_effects_and_refusals(tmp_path: Path) -> None:
    folder = tmp_path / "ledgers"
    folder.mkdir()
    effects, _ = paced(2)
    (folder / "ai_effects.json").write_text(json.dumps({"provider": "ai", "effects": effects,
                                                        "refusals": [refusal("narrative-a1", 99.0)]}))
    ledgers = load_ledgers(tmp_path)
    assert ledgers.ai_effects is not None and len(ledgers.ai_effects) == 2
    assert ledgers.ai_refusals is not None and ledgers.ai_refusals[0].status == "429"


def test_the_ai_lane_plot_is_drawn_only_for_a_run_with_ai_calls(tmp_path: Path) -> None:
    from chaos.plots.ai_lane import plot_ai_lane

    effects, reservations = paced(12)
    outbox = [{"operation_id": f"narrative-a{i}", "attempt_id": f"a{i}", "kind": "narrative", "status": "done",
               "created_at": 99.0, "done_at": 100.2 + i * 0.08} for i in range(12)]
    ledgers = Ledgers.from_exports(ai_effects=effects, ai_reservations=reservations, outbox=outbox)
    path = plot_ai_lane(ledgers, SCALE, tmp_path)
    assert path is not None and path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert plot_ai_lane(Ledgers.from_exports(ai_effects=[], outbox=outbox), SCALE, tmp_path / "none") is None


def test_a_run_that_lifted_the_limiter_is_judged_at_its_own_limit() -> None:
    effects, reservations = paced(16)
    burst = [f"narrative-b{i}" for i in range(9)]
    effects += [effect(op, 102 + i * 0.01) for i, op in enumerate(burst)]
    reservations += [reservation(op, 101.9) for op in burst]
    lifted = CheckOptions.from_scenario({"time_scale": SCALE, "settings": {"ai_calls_per_minute": 1000}})
    assert lifted.ai_calls_per_minute == 1000
    check = run_checkers([], ai_ledgers(effects, reservations), lifted).checks["provider_limit"]
    assert check.valid is True and check.details["limit"] == 1000
    assert CheckOptions.from_scenario({"settings": {"PROCTOR_AI_CALLS_PER_MINUTE": "8"}}).ai_calls_per_minute == 8
    with pytest.raises(OptionsError, match="ai_calls_per_minute"):
        CheckOptions.from_scenario({"settings": {"ai_calls_per_minute": 0}})


# ---------------------------------------------------------------- mutation survivors (#22 part 5)
def test_without_calls_every_ai_checker_notes_it_and_counts_nothing() -> None:
    checks = verdicts(ai_ledgers([], []))
    assert checks["provider_limit"].counts == {"over_limit": 0, "calls": 0}
    for name in ("billing", "paused_calls"):
        assert "no AI provider call in this run: nothing to check" in checks[name].notes, name


def test_the_nothing_to_check_note_needs_a_read_and_empty_ledger_and_a_valid_result() -> None:
    calls = verdicts(ai_ledgers(*paced(3)))
    assert all("no AI provider call" not in note for name in ("billing", "paused_calls") for note in calls[name].notes)
    unread = verdicts(Ledgers.from_exports(ai_reservations=[], audit_log=[], alerts=[], lane_state=[]))
    assert all("no AI provider call" not in note for note in unread["billing"].notes)
    # A reservation left open with no call at all: billing fails, and an invalid result gets no reassuring note.
    invalid = verdicts(ai_ledgers([], [reservation("narrative-a1", 100.0, state="bogus")]))
    assert invalid["billing"].valid is not True
    assert all("no AI provider call" not in note for note in invalid["billing"].notes)


def test_only_a_paused_ai_lane_is_noted_at_the_final_read() -> None:
    ledgers = Ledgers.from_exports(ai_effects=[], ai_reservations=[], audit_log=[], alerts=[], lane_state=[
        {"lane": "sms", "paused": True, "reason": "sms gateway down"}, {"lane": "ai", "paused": False}])
    assert not any("still paused" in note for note in verdicts(ledgers)["paused_calls"].notes)
    paused = Ledgers.from_exports(ai_effects=[], ai_reservations=[], audit_log=[], alerts=[], lane_state=[
        {"lane": "ai", "paused": True, "reason": "key revoked"}])
    assert "lane ai still paused at the final read: key revoked" in verdicts(paused)["paused_calls"].notes


def test_a_limit_of_one_call_a_minute_is_a_valid_setting() -> None:
    from chaos.checkers.ailane import declared_ai_limit

    assert declared_ai_limit({"settings": {"ai_calls_per_minute": 1}}) == 1
    with pytest.raises(OptionsError, match="whole number >= 1"):
        declared_ai_limit({"settings": {"PROCTOR_AI_CALLS_PER_MINUTE": "0"}})
