"""Workers SIGKILLed mid-job: nothing lost, nothing done twice, everything final.

Two negative controls prove the checkers can see what this scenario guards
against: with the reconciler off a killed job is lost; with the SMS
Idempotency-Key off a kill after the gateway accepted sends a second SMS.
"""

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


def _mid_job_kills(run) -> list[dict]:
    return [f for f in run.faults() if f["kind"] == "kill" and f.get("mid_job")]


def _kills_after_accept(run) -> list[dict]:
    """Kills that landed after the provider committed the effect and before the worker heard."""
    return [f for f in _mid_job_kills(run) if f.get("after_effect")]


def test_worker_kills_lose_nothing_and_duplicate_nothing(run_chaos):
    run = run_chaos("worker_kill")
    assert _mid_job_kills(run), "no kill landed mid-job: the scenario did not exercise what it claims"
    assert run.valid is True, run.summary()
    bounds = run.verdict["bounds"]  # derived from this run's measured restarts, not fixed
    assert bounds["slo.merit.oldest_age"]["value"] is not None, bounds
    assert bounds["outcome_deadline_seconds"]["value"] is not None, bounds
    assert run.checker("answers")["counts"]["lost"] == 0
    effects = run.checker("effects")["counts"]
    assert effects["duplicated"] == 0 and effects["missing"] == 0, effects
    assert run.checker("jobs")["counts"]["stuck"] == 0
    assert run.recheck() == 0  # `proctor check` reaches the same verdict from the stored files


@pytest.mark.negative_control
def test_stalls_no_kill_explains_break_the_derived_bounds(run_chaos):
    run = run_chaos("lanes_stalled")
    assert run.valid is False, run.summary()
    violations = run.checker("latency")["examples"].get("slo_violations", [])
    assert any(v["slo"] == "merit" and v["threshold"] == "oldest_age" for v in violations), run.summary()
    assert run.checker("jobs")["counts"]["deadline_exceeded"] >= 1, run.summary()
    assert run.recheck() == 1  # `proctor check` re-derives the same bounds offline


@pytest.mark.negative_control
def test_without_reconciler_a_killed_job_is_reported_lost(run_chaos):
    run = run_chaos("worker_kill_no_reconciler")
    assert _kills_after_accept(run), "the kill did not land between the AI effect and its answer: proves nothing"
    # the tree read right before the kill still had the horse: the job was in flight when it died
    assert any(len(f["pids"]) > 1 for f in _mid_job_kills(run)), run.faults()
    assert run.valid is False, run.summary()
    assert run.checker("jobs")["valid"] is False
    assert run.checker("jobs")["counts"]["stuck"] >= 1, run.summary()
    assert run.recheck() == 1  # `proctor check` reaches the same verdict from the stored files


@pytest.mark.negative_control
def test_without_sms_idempotency_a_kill_after_accept_duplicates_the_sms(run_chaos):
    run = run_chaos("sms_no_idempotency")
    assert _kills_after_accept(run), "the kill did not land after the gateway accepted: this control proves nothing"
    assert run.valid is False, run.summary()
    assert run.checker("effects")["counts"]["duplicated"] >= 1, run.summary()


def test_with_sms_idempotency_the_same_kill_sends_once(run_chaos):
    run = run_chaos("sms_kill_after_accept")
    assert _kills_after_accept(run), "the kill did not land after the gateway accepted: nothing was exercised"
    assert run.valid is True, run.summary()
    assert run.checker("effects")["counts"]["duplicated"] == 0
