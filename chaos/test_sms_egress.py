"""SMS egress across a failover of the SMS worker's host (issue #26, docs/egress.md).

The active SMS worker's host is lost mid-exam (its tree and every process bound to its
addresses SIGKILLed); the standby takes the lane and the reserved address moves with it.
Proof from the gateway's own ledger: each finished attempt's SMS exactly once, from the
allowed address. The negative control moves the lane but not the address: the gateway's
403 must halt the lane with an alert, keep the jobs pending, and be reported undelivered.
The positive scenario also runs with ``--chaos-target compose`` (the address is a fixed IP the
engine re-attaches: docs/egress.md "Compose"); the negative control runs embedded only.
"""

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


def _host_loss(run) -> dict:
    [loss] = [f for f in run.faults() if f["kind"] == "host_loss"]
    return loss


def test_standby_takes_the_lane_and_the_reserved_address_and_every_sms_arrives_once(run_chaos):
    run = run_chaos("sms_worker_failover")
    loss = _host_loss(run)
    egress = run.checker("egress")
    reserved = egress["details"]["allowed"]  # 127.0.0.10 embedded, the egress network's .10 on compose
    assert reserved in loss["addresses"] and loss["pids"], loss  # the holder's host, killed by pid
    assert run.valid is True, run.summary()
    assert egress["counts"]["delivered"] == egress["counts"]["finished"] > 0, egress
    assert egress["counts"]["wrong_source"] == 0 and egress["counts"]["duplicated"] == 0
    bound = egress["details"]["sms_bound"]
    assert bound["value"] is not None and bound["failover_seconds"] > 0, bound  # measured, then the bound from it
    assert run.checker("effects")["counts"]["missing_sms"] == 0
    assert run.recheck() == 0


@pytest.mark.negative_control
def test_a_standby_without_the_reserved_address_halts_the_lane_and_is_reported_undelivered(run_chaos):
    run = run_chaos("sms_worker_failover_no_address")
    assert _host_loss(run)
    assert run.valid is False, run.summary()
    egress = run.checker("egress")
    assert egress["valid"] is False and egress["counts"]["not_delivered"] >= 1, egress
    assert [a["kind"] for a in egress["examples"]["alerts"]] == ["egress_refused"], egress  # the halt's evidence
    # A 403 is a halt, not a retry loop: the lane paused after the first refusal and the rows wait for review.
    assert egress["counts"]["refused_403"] <= 2, egress
    assert run.checker("jobs")["counts"]["failed"] == 0 and run.checker("jobs")["counts"]["pending"] >= 1
    assert run.recheck() == 1
