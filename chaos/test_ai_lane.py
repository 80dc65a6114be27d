"""The AI lane's failure table on the real embedded stack (issue #11), each with its negative control.

Relay, two RQ AI workers and the fake provider over HTTP (chaos/scenarios/ai_lane.py), at
TIME_SCALE 0.05 (a case-minute is 3 s), where the shared limit, not the workers, holds the
backlog back. Verdicts rest on the provider's ledger and the stack's exports: calls over
the limit in any sliding case-minute, retries before Retry-After, calls while paused,
duplicate charges, the billing equation, every narrative final. The drain ratio is
printed, never asserted (loadtests/bench_ai_drain.py measures it with 100 jobs).
"""

from __future__ import annotations

import json

import pytest

from chaos.checkers.provider_limit import calls_over_limit

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

LIMIT = 8


def _lane(run, lane: str = "ai") -> dict:  # chaos.pytest_plugin.ChaosRun
    """What the lane driver measured (scenario.json "background")."""
    return json.loads((run.run_dir / "scenario.json").read_text())["background"][f"{lane}_lane"]


def _ledger(run, name: str) -> dict:
    return json.loads((run.run_dir / "ledgers" / f"{name}.json").read_text())


def _backlog_drained(run, lane_name: str = "ai") -> dict:
    lane = _lane(run, lane_name)
    print(json.dumps(lane))
    assert lane["backlog_ready"] and lane["n"] >= 20, lane  # the scenario exercised a real backlog
    assert lane["drained"], lane
    return lane


def _limit_reached(run, window: float) -> bool:
    """Some sliding case-minute held the full limit: the limiter was exercised, not idle."""
    times = [effect["started_at"] for effect in _ledger(run, "ai_effects")["effects"]]
    return bool(calls_over_limit(times, LIMIT - 1, window))


def test_a_429_storm_keeps_the_limit_and_every_retry_after(run_chaos) -> None:
    run = run_chaos("ai_storm")
    lane = _backlog_drained(run)
    assert run.valid is True, run.summary()
    assert run.checker("provider_limit")["counts"]["over_limit"] == 0
    assert _limit_reached(run, lane["case_minute_seconds"]), "the limiter never had to hold anything back"
    retry = run.checker("retry_after")["counts"]
    assert retry["ai_with_retry_after"] >= 1 and retry["early_retry"] == 0, retry
    billing = run.checker("billing")["counts"]
    assert billing["completed"] == lane["n"] == billing["charges"] and billing["released"] >= 4  # the 429s
    assert run.recheck() == 0


@pytest.mark.negative_control
@pytest.mark.parametrize("scenario, checker, violation", [
    ("ai_storm_per_worker_limiter", "provider_limit", "over_limit"),  # 4 limiters of 8: up to 32 a case-minute
    ("ai_storm_ignore_retry_after", "retry_after", "early_retry"),  # back after 1 case-min, told 10
])
def test_storm_controls_are_caught(run_chaos, scenario: str, checker: str, violation: str) -> None:
    run = run_chaos(scenario)
    _backlog_drained(run)
    assert run.valid is False, run.summary()
    assert run.checker(checker)["violations"] == [violation], run.summary()
    assert run.recheck() == 1  # `proctor check` reaches the same verdict from the stored files


def test_lost_responses_and_credit_exhaustion_charge_once_pause_alert_and_complete(run_chaos) -> None:
    run = run_chaos("ai_credit_and_lost_responses")  # both lanes in one run: see _sms_lane_had_the_same_classes
    lane = _backlog_drained(run)
    assert lane["halted"], lane  # the 402 paused the lane and raised the alert
    assert run.valid is True, run.summary()
    paused = run.checker("paused_calls")
    assert paused["counts"]["alerts"] >= 1 and paused["counts"]["called_while_paused"] == 0
    assert paused["counts"]["pause_windows"] >= 2  # the backlog's pause, then the credit pause
    assert run.checker("duplicate_charges")["counts"]["duplicate_charges"] == 0
    audit = _ledger(run, "audit_log")["rows"]
    reconciled = [row for row in audit if row["action"] == "reconcile" and row["detail"]["found"]]
    print(f"reconciliations (found by operation id): {len(reconciled)}")
    assert len(reconciled) >= 1  # lost answers settled by asking, not by a second call
    assert run.checker("billing")["counts"]["charges"] == lane["n"]
    _sms_lane_had_the_same_classes(run)


def _sms_lane_had_the_same_classes(run) -> None:
    """The SMS gateway's 429 with Retry-After, then its 402: deferred past Retry-After, paused with an
    alert, resumed through the admin API, every SMS sent exactly once."""
    lane = _backlog_drained(run, "sms")
    assert lane["halted"], lane
    retry = run.checker("retry_after")["counts"]
    assert retry["sms_with_retry_after"] >= 1 and retry["early_retry"] == 0, retry
    alerts = [(a["lane"], a["kind"]) for a in _ledger(run, "alerts")["rows"]]
    assert ("sms", "credit_exhausted") in alerts, alerts
    sms_effects = _ledger(run, "sms_effects")["effects"]
    assert sorted(e["operation_id"] for e in sms_effects) == sorted({e["operation_id"] for e in sms_effects})
    assert len(sms_effects) == lane["n"]


@pytest.mark.negative_control
def test_replay_without_asking_first_is_caught_as_a_duplicate_charge(run_chaos) -> None:
    run = run_chaos("ai_blind_replay")
    _backlog_drained(run)
    assert run.valid is False, run.summary()
    assert run.checker("duplicate_charges")["counts"]["duplicate_charges"] >= 1, run.summary()


def test_a_worker_killed_mid_call_then_a_revoked_key_settle_once_pause_alert_and_complete(run_chaos) -> None:
    run = run_chaos("ai_key_revoked_worker_killed")
    lane = _backlog_drained(run)
    killed = lane.get("killed") or {}
    assert lane["in_call"] and killed.get("orphaned_calls"), lane  # the kill left a call at the provider
    assert lane["halted"], lane
    assert run.valid is True, run.summary()
    assert run.checker("paused_calls")["details"]["alert_kinds"] == ["key_revoked"]
    reconciled = {row["detail"]["operation_id"] for row in _ledger(run, "audit_log")["rows"]
                  if row["action"] == "reconcile"}
    orphaned = {call_id.rsplit("#", 1)[0] for call_id in killed["orphaned_calls"]}
    assert orphaned <= reconciled, "the killed call's pending reservation was never settled by asking the provider"
    assert run.checker("billing")["counts"]["charges"] == lane["n"] == run.checker("billing")["counts"]["completed"]


def test_expired_items_wait_in_review_with_their_record_and_one_replay_completes_each(run_chaos) -> None:
    run = run_chaos("ai_deadline_expiry")
    lane = _backlog_drained(run)
    expired = lane["resumes"][0]["to_review"]
    assert len(expired) == lane["n"], lane  # every narrative outlived its deadline while paused
    assert sorted(item["operation_id"] for item in lane["review"]) == sorted(expired)
    assert all(item["has_record"] for item in lane["review"])
    assert run.valid is True, run.summary()
    assert run.checker("duplicate_charges")["counts"]["effects"] == lane["n"]  # exactly once each
    assert run.checker("effects")["counts"]["replayed_from_review"] == lane["n"]
    replays = [row for row in _ledger(run, "audit_log")["rows"] if row["action"] == "review_replay"]
    assert sorted(row["detail"]["operation_id"] for row in replays) == sorted(expired)

