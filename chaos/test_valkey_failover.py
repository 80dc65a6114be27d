"""Valkey failover (issue #25): the primary SIGKILLed mid-exam, a replica promoted by three
Sentinels; or cut off through its node link (a partition), then healed. Nothing acknowledged is
lost, every finished attempt's jobs complete, no effect is duplicated, and every client component
reaches the new primary. The negative control (the reconciler off) must report the job that was
in flight when the primary died. The partition has no such control: its job in flight is lost
only sometimes (docs/valkey.md), and a control that can pass proves nothing.

``tls_churn_sentinel`` shows that the fault-proxy links still inject with Sentinel on.

The failover also runs on compose (``docker-compose.sentinel.yml``, in ``make test``'s parity pass);
the partition and tls_churn_sentinel need node links, which compose's Sentinel topology does not
have yet, and the memory scenarios the filler: those, and the negative controls, run embedded only.
"""

import json

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


def _kill_before_the_answer(run) -> dict:
    """The kill struck after the AI provider recorded a narrative and before it answered: the
    provider held that answer until the kill had landed (stack/providers/hold.py), however late."""
    [start] = [f for f in run.faults() if f["kind"] == "failover"]
    assert start["mid_job"] and start["after_effect"], start
    assert start["effect_age_at_kill"] >= 0, start
    assert start["answer_released_after_kill"] >= 0, ("the answer came before the kill", start)
    return start


def _failover(run) -> dict:
    """The failover's measured timeline (its fault-end, as the report shows it)."""
    ends = run.verdict["failovers"]
    assert len(ends) == 1, run.faults()
    return ends[0]


def test_a_primary_failover_loses_nothing_and_every_client_follows(run_chaos):
    run = run_chaos("valkey_failover")
    _kill_before_the_answer(run)  # so a job was certainly lost with the old primary
    failover = _failover(run)
    assert failover["switch_seconds"] is not None, failover  # the Sentinels promoted the replica
    assert failover["primary_after"] not in (None, failover["node"]), failover
    assert failover["never_back"] == [], failover  # web nodes, relay and every worker found the new primary
    assert failover["rejoined_as_replica"] is True, failover  # the old primary came back as a replica
    assert run.valid is True, run.summary()
    assert run.checker("answers")["counts"]["lost"] == 0
    assert run.checker("jobs")["counts"]["stuck"] == 0
    assert run.checker("effects")["counts"]["duplicated"] == 0
    bounds = run.verdict["bounds"]  # derived from the measured switch and first connections
    assert bounds["outcome_deadline_seconds"]["value"] is not None, bounds
    assert run.recheck() == 0


@pytest.mark.negative_control
def test_without_reconciler_the_job_lost_in_the_failover_is_reported(run_chaos):
    run = run_chaos("valkey_failover_no_reconciler")
    failover = _failover(run)
    assert failover["switch_seconds"] is not None, failover
    _kill_before_the_answer(run)  # else no job need be lost: this control would prove nothing
    assert run.valid is False, run.summary()
    assert run.checker("jobs")["counts"]["stuck"] >= 1, run.summary()
    assert run.recheck() == 1


def test_a_partitioned_primary_loses_nothing_and_every_worker_serves_the_new_one(run_chaos):
    """The primary goes silent (everything it sends dropped) and heals on schedule. The workers
    lose Valkey for a liveness TTL, exit and are restarted: the bounds count each worker's window
    up to its measured return to service, not its first reconnect (docs/valkey.md)."""
    run = run_chaos("valkey_partition")
    failover = _failover(run)
    assert failover["kind"] == "partition" and failover["switch_seconds"] is not None, failover
    assert failover["primary_after"] not in (None, failover["node"]), failover
    assert failover["never_back"] == [] and failover["never_serving"] == [], failover
    assert failover["rejoined_as_replica"] is True, failover  # healed, demoted, following the new primary
    assert all(failover["serving"][name] >= failover["switch_at"] for name in failover["serving"]), failover
    assert run.valid is True, run.summary()
    assert run.checker("answers")["counts"]["lost"] == 0
    assert run.checker("jobs")["counts"]["stuck"] == 0
    assert run.checker("effects")["counts"]["duplicated"] == 0
    deadline = run.verdict["bounds"]["outcome_deadline_seconds"]
    windows = {target: end for target, _, end in deadline["terms"]["kills"]}
    assert windows == failover["serving"], (windows, failover["serving"])  # the measured return, not a guess
    assert run.recheck() == 0


def test_with_sentinel_the_node_links_still_inject_into_every_client(run_chaos):
    """Sentinel hands clients the addresses the nodes announce: the node links' proxies. So the
    tls_churn toxics on those links must break the web nodes', relay's and workers' connections."""
    run = run_chaos("tls_churn_sentinel")
    applied = [f for f in run.faults() if f["kind"] == "toxic" and not f.get("error")]
    assert "valkey_node_1" in {f["target"] for f in applied}, applied  # the primary's link: what clients use
    assert run.valid is True, run.summary()
    conn = run.checker("connections")
    components = conn["details"]["components"]
    assert sum(c["reconnects"] for n, c in components.items() if n.startswith("web_") or n == "relay") > 0, components
    assert conn["counts"]["component_errors"] > 0, "the toxics broke no client connection: the links were bypassed"


def test_a_full_valkey_refuses_writes_yet_loses_no_answer_and_no_job(run_chaos):
    """noeviction: the filler fills Valkey to maxmemory and keeps it full; the stack's own writes
    are refused (OOM) meanwhile, counted per component. Answers need only the ledger; every job
    is done once it is freed."""
    from chaos.history import read_history

    run = run_chaos("valkey_memory_pressure")
    filler = json.loads((run.run_dir / "scenario.json").read_text())["background"]["filler"]
    assert filler["full"] and filler["refusals"] >= 2, filler  # refused, and still refusing while held
    assert filler["freed"] == filler["keys"] > 0, filler
    statuses = [op.status for op in read_history(run.run_dir / "history.jsonl").ops
                if op.type in ("ok", "fail", "info") and getattr(op, "status", None)]
    assert statuses and all(status < 500 for status in statuses), sorted(set(statuses))
    assert run.valid is True, run.summary()
    assert run.checker("answers")["counts"]["lost"] == 0
    assert run.checker("jobs")["counts"]["stuck"] == 0
    assert run.checker("effects")["counts"]["duplicated"] == 0
    components = run.checker("connections")["details"]["components"]
    events = {name: c["events"] for name, c in components.items() if not c["harness"]}
    # Each component counts what a full Valkey refused it (the report's connections table).
    assert events.get("relay", {}).get("oom_refusals", 0) > 0, events
    web = {name: e for name, e in events.items() if name.startswith("web_")}
    assert sum(e.get("oom_refusals", 0) for e in web.values()) > 0, events
    # The limiter fell back to per-node memory while full, and said so.
    assert sum(e.get("limiter_fallbacks", 0) for e in web.values()) > 0, events
    # The relay's passes failed and were retried (with backoff), the rows kept pending, not lost:
    assert events["relay"].get("relay_failed_passes", 0) > 0, events
    outbox = json.loads((run.run_dir / "ledgers" / "outbox.json").read_text())["rows"]
    assert outbox and {row["status"] for row in outbox} == {"done"}, sorted({row["status"] for row in outbox})


@pytest.mark.negative_control
def test_a_relay_marking_rows_before_valkey_took_the_job_loses_it_when_full(run_chaos):
    """The relay marks the row enqueued first (PROCTOR_RELAY_MARK_EARLY); Valkey, full, refuses the
    job; nothing sends it again (the reconciler, the other safety net, is off): reported stuck."""
    run = run_chaos("valkey_memory_pressure_early_mark")
    filler = json.loads((run.run_dir / "scenario.json").read_text())["background"]["filler"]
    assert filler["full"], filler
    relay = run.checker("connections")["details"]["components"].get("relay", {})
    assert relay.get("events", {}).get("oom_refusals", 0) > 0, "the relay was never refused: this control proves nothing"
    assert run.valid is False, run.summary()
    jobs = run.checker("jobs")
    assert jobs["counts"]["stuck"] >= 1, run.summary()
    # The row points at a job Valkey never held (not one a worker failed or lost).
    states = {example.get("queue_state") for example in jobs["examples"]["stuck"]}
    assert "absent" in states, jobs["examples"]["stuck"]
    assert run.checker("answers")["counts"]["lost"] == 0
    assert run.recheck() == 1
