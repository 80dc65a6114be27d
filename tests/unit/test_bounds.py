"""chaos/bounds.py on hand-written histories and outboxes: each term, each bound, and the
checkers catching a stall the kills do not explain (the anomaly comes after valid ops)."""

from __future__ import annotations

from typing import Any

import pytest

import chaos.bounds as bounds_module
from chaos.bounds import apply_bounds, bounds_markdown, derive_bounds, kill_windows
from chaos.checkers import CheckOptions
from chaos.checkers.jobs import check_jobs
from chaos.checkers.latency import check_latency
from chaos.history import Op
from chaos.ledgers import Ledgers, OutboxRow

T0 = 1000.0  # wall clock of the made-up run
SCENARIO: dict[str, Any] = {
    "settings": {"liveness_ttl": 3.0, "relay_interval": 0.5},
    "stack": {"merit_workers": 2, "ai_workers": 1, "sms_workers": 1},
    "derive_bounds": ["outcome_deadline_seconds", "slo.merit.oldest_age"],
}


class Ops:
    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, process: str, f: str, value: dict[str, Any], at: float) -> None:
        self.ops.append(Op(index=len(self.ops), time=at, process=process, type="info", f=f, value=value))

    def kill(self, fault_id: int, target: str, killed_at: float, ready_at: float | None) -> None:
        value = {"fault_id": fault_id, "kind": "kill", "target": target}
        self.add("nemesis", "fault-start", {**value, "killed_at": killed_at}, killed_at - T0)
        if ready_at is not None:
            self.add("nemesis", "fault-end", {**value, "ready": True, "ready_at": ready_at}, ready_at - T0)

    def sample(self, at: float, oldest: float) -> None:
        self.add("monitor", "sample", {"lanes": {"merit": {"depth": 1, "oldest_age": oldest}}}, at - T0)


def merit_rows(count: int = 10, spacing: float = 0.5, service: float = 0.2, first: int = 0) -> list[OutboxRow]:
    """Merit jobs created every ``spacing`` s (the first at T0 + first * spacing), enqueued
    50 ms later, done ``service`` after that."""
    return [OutboxRow(operation_id=f"merit-a{i}", attempt_id=f"a{i}", kind="merit", status="done", attempts=1,
                      created_at=T0 + i * spacing, enqueued_at=T0 + i * spacing + 0.05,
                      done_at=T0 + i * spacing + 0.05 + service) for i in range(first, first + count)]


def one_merit_kill() -> Ops:
    ops = Ops()
    ops.kill(0, "worker_merit_1", T0 + 1.0, T0 + 3.0)
    return ops


def test_kill_windows_pair_start_and_measured_ready_time():
    ops = one_merit_kill()
    ops.kill(1, "worker_ai_1", T0 + 4.0, None)
    windows = kill_windows(ops.ops)
    assert [(w.target, w.lane, w.start, w.end) for w in windows] == [
        ("worker_merit_1", "merit", T0 + 1.0, T0 + 3.0), ("worker_ai_1", "ai", T0 + 4.0, None)]


def test_a_kill_windows_lane_comes_from_the_typed_component_name():
    ops = one_merit_kill()
    ops.kill(1, "worker_merit_2", T0 + 4.0, T0 + 5.0)
    assert [(w.target, w.lane) for w in kill_windows(ops.ops)] == [("worker_merit_1", "merit"), ("worker_merit_2", "merit")]


def test_a_worker_kill_whose_target_is_not_a_worker_name_is_refused_by_name():
    ops = one_merit_kill()
    ops.kill(1, "worker_gpu_1", T0 + 4.0, T0 + 5.0)  # after a valid kill; the old split gave lane "gpu"
    with pytest.raises(ValueError, match="component name 'worker_gpu_1' is not a worker's"):
        kill_windows(ops.ops)


def test_one_of_two_merit_workers_killed_bounds_the_oldest_job_by_its_backlog():
    derived = derive_bounds(SCENARIO, one_merit_kill().ops, merit_rows())
    terms = derived["slo.merit.oldest_age"]["terms"]
    # nobody-serving time 0 (worker 2 stayed); 5 jobs created in [1001, 1003]; 1 per 0.4 s window;
    # the lane never queued, so a job costs its queue-to-done time
    assert (terms["all_down"], terms["queue_backlog"], terms["burst"]) == (0.0, 5, 1)
    assert terms["per_job"] == pytest.approx(0.2) and terms["per_job_from"] == "median queue-to-done of 10 jobs"
    assert derived["slo.merit.oldest_age"]["value"] == pytest.approx((2 + 1 + 5) * 0.2)


def test_deadline_adds_relay_pass_cluster_span_and_one_detection_per_kill():
    derived = derive_bounds(SCENARIO, one_merit_kill().ops, merit_rows())
    deadline = derived["outcome_deadline_seconds"]
    # relay 0.5 + span 2.0 + 1 kill * (ttl 3 + 2 * 0.5) + (2 workers + 1 burst + 5 backlog) * 0.2
    assert deadline["value"] == pytest.approx(0.5 + 2.0 + 4.0 + 1.6)
    assert deadline["terms"]["per_lane"] == {"merit": pytest.approx(8.1)}


def test_overlapping_kills_of_both_merit_workers_count_as_all_down():
    ops = one_merit_kill()
    ops.kill(1, "worker_merit_2", T0 + 2.0, T0 + 4.0)
    terms = derive_bounds(SCENARIO, ops.ops, merit_rows())["slo.merit.oldest_age"]["terms"]
    assert terms["all_down"] == pytest.approx(1.0)
    assert terms["cluster_kills"] == 2 and terms["cluster_span"] == pytest.approx(3.0)


def test_kills_further_apart_than_a_detection_are_separate_clusters():
    ops = one_merit_kill()
    ops.kill(1, "worker_merit_1", T0 + 8.0, T0 + 8.5)  # 5 s after the first was ready: > 4 s detection
    terms = derive_bounds(SCENARIO, ops.ops, merit_rows(count=20))["slo.merit.oldest_age"]["terms"]
    assert (terms["cluster_kills"], terms["cluster_span"]) == (1, pytest.approx(2.0))


def busy_rows(gaps: list[float]) -> list[OutboxRow]:
    """Jobs all waiting from T0, completed one after another ``gaps`` apart (a busy lane)."""
    rows, done = [], T0
    for i, gap in enumerate(gaps):
        done += gap
        rows.append(OutboxRow(operation_id=f"merit-b{i}", attempt_id=f"b{i}", kind="merit", status="done",
                              attempts=1, created_at=T0, enqueued_at=T0, done_at=done))
    return rows


def test_a_busy_lane_costs_the_median_gap_between_completions():
    terms = derive_bounds(SCENARIO, [], busy_rows([0.3] * 6))["slo.merit.oldest_age"]["terms"]
    assert terms["per_job"] == pytest.approx(0.3)
    assert terms["per_job_from"] == "median of 5 completion gaps while jobs waited"


def test_a_stall_in_fewer_than_half_the_gaps_does_not_excuse_itself():
    terms = derive_bounds(SCENARIO, [], busy_rows([0.3] * 6 + [4.0]))["slo.merit.oldest_age"]["terms"]
    assert terms["per_job"] == pytest.approx(0.3)


def test_a_worker_that_never_came_back_leaves_the_bound_underivable_and_the_option_unset():
    ops = Ops()
    ops.kill(0, "worker_merit_1", T0 + 1.0, None)
    derived = derive_bounds(SCENARIO, ops.ops, merit_rows())
    assert derived["slo.merit.oldest_age"]["value"] is None
    assert "never came back" in derived["slo.merit.oldest_age"]["note"]
    assert apply_bounds({"slo": {"answer": {"p99": 1.0}}}, derived) == {"slo": {"answer": {"p99": 1.0}}}


def test_apply_bounds_sets_the_checker_options_without_touching_the_input():
    options = {"slo": {"answer": {"p99": 1.0}}}
    derived = derive_bounds(SCENARIO, one_merit_kill().ops, merit_rows())
    applied = apply_bounds(options, derived)
    assert applied["slo"] == {"answer": {"p99": 1.0}, "merit": {"oldest_age": pytest.approx(1.6)}}
    assert applied["outcome_deadline_seconds"] == pytest.approx(8.1)
    assert options == {"slo": {"answer": {"p99": 1.0}}}
    CheckOptions.from_dict(applied)  # the checkers accept what we produce


def test_no_bounds_asked_for_derives_nothing_and_an_unknown_name_is_refused():
    assert derive_bounds({}, one_merit_kill().ops, merit_rows()) == {}
    with pytest.raises(ValueError, match="derive_bounds"):
        derive_bounds({"derive_bounds": ["slo.ai.p99"]}, [], [])


def test_report_section_shows_each_bound_with_its_terms():
    lines = "\n".join(bounds_markdown(derive_bounds(SCENARIO, one_merit_kill().ops, merit_rows())))
    assert "slo.merit.oldest_age** = 1.6 s" in lines and "'queue_backlog': 5" in lines
    assert "detection 4.0 s (liveness_ttl 3.0 + 2 x relay_interval 0.5)" in lines



def test_kill_windows_skip_what_is_not_a_timed_worker_kill():
    ops = one_merit_kill()
    ops.kill(1, "web_2", T0 + 4.0, T0 + 5.0)  # a web node: no lane
    ops.add("nemesis", "fault-start", {"fault_id": 2, "kind": "kill", "target": "worker_ai_1"}, 6.0)  # no killed_at
    ops.add("nemesis", "fault-end", {"fault_id": 2, "kind": "kill", "target": "worker_ai_1", "ready": True,
                                     "ready_at": T0 + 7.0}, 7.0)
    assert [(w.target, w.start, w.end) for w in kill_windows(ops.ops)] == [("worker_merit_1", T0 + 1.0, T0 + 3.0)]


def test_a_run_without_kills_bounds_by_service_and_burst_alone():
    derived = derive_bounds(SCENARIO, [], merit_rows())
    lanes = derived["outcome_deadline_seconds"]["terms"]["lanes"]
    assert lanes["merit"] == {"lane": "merit", "workers": 2, "all_down": 0.0, "per_job": pytest.approx(0.2),
                              "per_job_from": "median queue-to-done of 10 jobs", "burst": 1, "queue_backlog": 0,
                              "backlog": 0, "cluster_backlog": 0, "queue_ahead": 0, "cluster_span": 0.0,
                              "cluster_kills": 0}
    assert lanes["ai"] == {"lane": "ai", "jobs": 0}
    # relay 0.5 + no cluster + (2 workers + 1 burst) * 0.2
    assert derived["outcome_deadline_seconds"]["value"] == pytest.approx(0.5 + 0.6)
    assert derived["slo.merit.oldest_age"]["value"] == pytest.approx(0.6)


def test_the_runs_settings_set_the_relay_pass_and_the_detection():
    scenario = {**SCENARIO, "settings": {"liveness_ttl": 2.0, "relay_interval": 0.25}}
    deadline = derive_bounds(scenario, one_merit_kill().ops, merit_rows())["outcome_deadline_seconds"]
    assert deadline["terms"]["detection"] == pytest.approx(2.5)
    # relay 0.25 + span 2.0 + 1 kill * (ttl 2 + 2 * 0.25) + (2 + 1 + 5) * 0.2
    assert deadline["value"] == pytest.approx(0.25 + 2.0 + 2.5 + 1.6)


def test_a_scenario_without_its_stack_counts_one_worker_per_lane():
    ops = one_merit_kill()
    ops.kill(1, "worker_merit_2", T0 + 2.0, T0 + 5.0)  # overlaps the first: [1, 5] with one worker counted
    derived = derive_bounds({"derive_bounds": ["slo.merit.oldest_age"]}, ops.ops, merit_rows())
    terms = derived["slo.merit.oldest_age"]["terms"]
    # 8 jobs created in [1001, 1005]; one 0.2 s window holds 1 of them
    assert (terms["workers"], terms["all_down"], terms["burst"], terms["queue_backlog"]) == (1, 4.0, 1, 8)
    assert derived["slo.merit.oldest_age"]["value"] == pytest.approx(4.0 + (1 + 1 + 8) * 0.2)


def test_a_later_longer_stretch_with_both_merit_workers_down_is_the_all_down_time():
    ops = one_merit_kill()
    ops.kill(1, "worker_merit_2", T0 + 2.0, T0 + 4.0)  # both down for 1 s
    ops.kill(2, "worker_merit_1", T0 + 10.0, T0 + 14.0)
    ops.kill(3, "worker_merit_2", T0 + 11.0, T0 + 13.5)  # both down for 2.5 s
    terms = derive_bounds(SCENARIO, ops.ops, merit_rows(count=30))["slo.merit.oldest_age"]["terms"]
    assert terms["all_down"] == pytest.approx(2.5)


def test_kills_closer_than_a_queue_drain_leave_one_backlog():
    ops = one_merit_kill()
    ops.kill(1, "worker_merit_1", T0 + 3.4, T0 + 4.0)  # 0.4 s after the first: < (2 workers + 1 burst) * 0.2
    derived = derive_bounds(SCENARIO, ops.ops, merit_rows())
    terms = derived["slo.merit.oldest_age"]["terms"]
    assert terms["queue_backlog"] == 7  # created in [1001, 1004]
    assert derived["slo.merit.oldest_age"]["value"] == pytest.approx((2 + 1 + 7) * 0.2)


def test_kills_chain_from_the_end_of_the_last_window_not_its_start():
    ops = Ops()
    ops.kill(0, "worker_merit_1", T0 + 1.0, T0 + 6.0)
    ops.kill(1, "worker_merit_1", T0 + 8.0, T0 + 9.0)  # 2 s after the ready: < 4 s detection
    terms = derive_bounds(SCENARIO, ops.ops, merit_rows(count=20))["slo.merit.oldest_age"]["terms"]
    assert (terms["cluster_kills"], terms["cluster_span"], terms["backlog"]) == (2, pytest.approx(8.0), 17)


def test_the_deadline_takes_the_cluster_with_more_kills_over_a_longer_one():
    ops = Ops()
    ops.kill(0, "worker_merit_1", T0 + 1.0, T0 + 4.0)  # span 3, 1 kill, 7 jobs: 3 + 4 + 1.4 = 8.4
    ops.kill(1, "worker_merit_1", T0 + 20.0, T0 + 21.0)
    ops.kill(2, "worker_merit_2", T0 + 21.5, T0 + 22.5)  # span 2.5, 2 kills, 6 jobs: 2.5 + 8 + 1.2 = 11.7
    deadline = derive_bounds(SCENARIO, ops.ops, merit_rows(count=50))["outcome_deadline_seconds"]
    merit = deadline["terms"]["lanes"]["merit"]
    assert (merit["cluster_span"], merit["cluster_kills"], merit["backlog"]) == (pytest.approx(2.5), 2, 6)
    assert deadline["value"] == pytest.approx(0.5 + 11.7 + (2 + 1) * 0.2)


def test_a_shorter_cluster_with_more_jobs_behind_it_sets_both_bounds():
    ops = Ops()
    ops.kill(0, "worker_merit_1", T0 + 11.0, T0 + 14.0)  # the workload paused: no job created in it
    ops.kill(1, "worker_merit_1", T0 + 21.0, T0 + 23.5)  # 6 jobs created in it
    rows = merit_rows(count=21) + merit_rows(count=21, first=40)  # created in [1000, 1010] and [1020, 1030]
    derived = derive_bounds(SCENARIO, ops.ops, rows)
    merit = derived["outcome_deadline_seconds"]["terms"]["lanes"]["merit"]
    assert (merit["cluster_span"], merit["cluster_kills"], merit["backlog"], merit["queue_backlog"]) == (
        pytest.approx(2.5), 1, 6, 6)
    # relay 0.5 + span 2.5 + 1 detection 4 + (2 + 1 + 6) * 0.2, not the longer empty cluster's 0.5 + 3 + 4 + 0.6
    assert derived["outcome_deadline_seconds"]["value"] == pytest.approx(0.5 + 2.5 + 4.0 + 1.8)
    assert derived["slo.merit.oldest_age"]["value"] == pytest.approx(1.8)


def test_a_job_still_in_flight_at_the_export_is_not_a_service_time():
    in_flight = OutboxRow(operation_id="merit-late", attempt_id="late", kind="merit", status="enqueued", attempts=1,
                          created_at=T0 + 6.0, enqueued_at=T0 + 6.05)
    terms = derive_bounds(SCENARIO, [], merit_rows() + [in_flight])["slo.merit.oldest_age"]["terms"]
    assert (terms["per_job"], terms["per_job_from"]) == (pytest.approx(0.2), "median queue-to-done of 10 jobs")


def test_an_ai_worker_that_never_came_back_leaves_the_deadline_underivable_but_not_the_merit_bound():
    ops = one_merit_kill()
    ops.kill(1, "worker_ai_1", T0 + 4.0, None)
    derived = derive_bounds(SCENARIO, ops.ops, merit_rows())
    assert derived["outcome_deadline_seconds"]["value"] is None
    assert derived["outcome_deadline_seconds"]["note"] == "a killed ai worker never came back ready"
    assert derived["slo.merit.oldest_age"]["value"] == pytest.approx(1.6)
    assert apply_bounds({}, derived) == {"slo": {"merit": {"oldest_age": pytest.approx(1.6)}}}


def test_a_run_without_jobs_leaves_the_deadline_underivable():
    deadline = derive_bounds(SCENARIO, one_merit_kill().ops, [])["outcome_deadline_seconds"]
    assert (deadline["value"], deadline["note"]) == (None, "no jobs at all")


# ------------------------------------------------------------------ the checkers catch a stall


def _ledgers(rows: list[OutboxRow]) -> Ledgers:
    attempts = [{"attempt_id": r.attempt_id, "exam_code": "NOVA-101", "status": "finished", "finished_at": r.created_at}
                for r in rows]
    outbox = [dict(r.__dict__) for r in rows]
    return Ledgers.from_exports(attempts=attempts, outbox=outbox, outcomes=[], answers=[], ai_effects=[], sms_effects=[])


def _latency_with_derived(ops: Ops, rows: list[OutboxRow]) -> Any:
    derived = derive_bounds(SCENARIO, ops.ops, rows)
    return check_latency(ops.ops, _ledgers(rows), CheckOptions.from_dict(apply_bounds({}, derived)))


def test_merit_oldest_age_within_the_derived_bound_is_valid():
    ops = one_merit_kill()
    for i in range(8):
        ops.sample(T0 + i, oldest=1.5 if i == 3 else 0.2)  # the backlog after the kill: inside 1.6 s
    assert _latency_with_derived(ops, merit_rows()).valid is True


def test_a_stall_no_kill_explains_exceeds_the_derived_merit_bound():
    ops = one_merit_kill()
    for i in range(8):
        ops.sample(T0 + i, oldest=0.2)
    ops.sample(T0 + 9, oldest=4.0)  # the lane froze later, with every worker "ready"
    result = _latency_with_derived(ops, merit_rows())
    assert result.valid is False
    assert result.examples["slo_violations"] == [
        {"slo": "merit", "threshold": "oldest_age", "limit": pytest.approx(1.6), "observed": 4.0}]


def test_an_outcome_later_than_the_derived_deadline_is_reported():
    rows = merit_rows()
    late = OutboxRow(operation_id="merit-late", attempt_id="late", kind="merit", status="done", attempts=1,
                     created_at=T0 + 6.0, enqueued_at=T0 + 6.05, done_at=T0 + 6.0 + 9.0)  # after the valid ones
    derived = derive_bounds(SCENARIO, one_merit_kill().ops, rows + [late])
    result = check_jobs([], _ledgers(rows + [late]), CheckOptions.from_dict(apply_bounds({}, derived)))
    assert result.valid is False
    assert [e["operation_id"] for e in result.examples["deadline_exceeded"]] == ["merit-late"]
    assert result.counts["deadline_exceeded"] == 1


def test_module_exports_exactly_its_public_names():
    public = {name for name in vars(bounds_module) if not name.startswith("_") and callable(getattr(bounds_module, name))
              and getattr(getattr(bounds_module, name), "__module__", "") == "chaos.bounds"}
    assert public <= set(bounds_module.__all__)


# ------------------------------------------------------------ link toxics and crash restarts
LINKED = {**SCENARIO, "history_origin": T0}


def toxic(ops: Ops, fault_id: int, link: str, start: float, end: float | None) -> None:
    """A toxic on ``link`` from T0 + start to T0 + end (run time in the history; None: never ended)."""
    value = {"fault_id": fault_id, "kind": "toxic", "target": link, "type": "reset_peer"}
    ops.add("nemesis", "fault-start", value, start)
    if end is not None:
        ops.add("nemesis", "fault-end", {**value, "removed": True}, end)


def test_a_toxic_on_the_job_path_is_one_lane_wide_window_of_every_lane():
    ops = Ops()
    toxic(ops, 0, "valkey_web", 0.5, 1.0)  # the web's fast path falls back to the relay: no window
    toxic(ops, 1, "valkey_workers", 1.0, 2.0)
    toxic(ops, 2, "valkey_node_2", 3.0, 3.5)
    windows = bounds_module.link_windows(ops.ops, T0)
    assert {(w.target, w.start, w.end, w.lane_wide) for w in windows} == {
        ("valkey_workers", T0 + 1.0, T0 + 2.0, True), ("valkey_node_2", T0 + 3.0, T0 + 3.5, True)}
    assert sorted(w.lane for w in windows if w.target == "valkey_workers") == ["ai", "merit", "sms"]


def test_a_link_window_downs_both_merit_workers_and_costs_one_detection():
    ops = Ops()
    toxic(ops, 0, "valkey_relay", 1.0, 2.0)
    derived = derive_bounds(LINKED, ops.ops, merit_rows())
    terms = derived["slo.merit.oldest_age"]["terms"]
    # both workers down for the toxic's second; 3 jobs created inside it (1001.0, 1001.5, 1002.0)
    assert (terms["all_down"], terms["cluster_kills"], terms["cluster_span"], terms["backlog"]) == (1.0, 1, 1.0, 3)
    # relay 0.5 + span 1.0 + 1 * detection 4.0 + (2 workers + 1 burst + 3 backlog) * 0.2
    assert derived["outcome_deadline_seconds"]["value"] == pytest.approx(0.5 + 1.0 + 4.0 + 1.2)
    assert derived["outcome_deadline_seconds"]["terms"]["link_windows"] == [("valkey_relay", T0 + 1.0, T0 + 2.0)]


def test_a_toxic_that_never_ended_leaves_the_deadline_underivable_by_name():
    ops = Ops()
    toxic(ops, 0, "valkey_relay", 1.0, 2.0)
    toxic(ops, 1, "valkey_workers", 3.0, None)  # after a valid toxic
    deadline = derive_bounds(LINKED, ops.ops, merit_rows())["outcome_deadline_seconds"]
    assert deadline["value"] is None and "a toxic on valkey_workers never ended" in deadline["note"]


def test_without_the_history_origin_no_toxic_can_be_placed_and_none_is_counted():
    ops = Ops()
    toxic(ops, 0, "valkey_workers", 1.0, 2.0)
    assert derive_bounds(SCENARIO, ops.ops, merit_rows())["outcome_deadline_seconds"]["terms"]["link_windows"] == []


def test_a_crash_restart_is_a_kill_window_of_that_worker_from_gone_to_back():
    lifetimes = {"worker_merit_1": [(T0, T0 + 1.0), (T0 + 2.5, T0 + 9.0)], "web_1": [(T0, T0 + 1.0), (T0 + 2.0, T0 + 9.0)],
                 "worker_ai_1": [(T0, T0 + 9.0)]}
    windows = bounds_module.restart_windows(lifetimes, [])
    assert [(w.target, w.lane, w.start, w.end) for w in windows] == [("worker_merit_1", "merit", T0 + 1.0, T0 + 2.5)]
    deadline = derive_bounds(SCENARIO, [], merit_rows(), lifetimes)["outcome_deadline_seconds"]
    assert deadline["terms"]["kills"] == [["worker_merit_1", T0 + 1.0, T0 + 2.5]]
    # relay 0.5 + span 1.5 + 1 * detection 4.0 + (2 + 1 + 4 created in [1001, 1002.5]) * 0.2
    assert deadline["value"] == pytest.approx(0.5 + 1.5 + 4.0 + 1.4)


def test_a_restart_the_nemesis_caused_is_its_kill_window_not_a_second_one():
    lifetimes = {"worker_merit_1": [(T0, T0 + 0.99), (T0 + 2.8, T0 + 9.0)]}  # killed at 1001, back ready 1003
    deadline = derive_bounds(SCENARIO, one_merit_kill().ops, merit_rows(), lifetimes)["outcome_deadline_seconds"]
    assert deadline["terms"]["kills"] == [["worker_merit_1", T0 + 1.0, T0 + 3.0]]
    assert deadline["value"] == pytest.approx(8.1)  # as with the kill alone


def test_a_row_later_than_the_link_derived_deadline_is_caught():
    ops = Ops()
    toxic(ops, 0, "valkey_workers", 1.0, 2.0)
    late = OutboxRow(operation_id="merit-late", attempt_id="late", kind="merit", status="done", attempts=2,
                     created_at=T0 + 5.0, enqueued_at=T0 + 5.05, done_at=T0 + 5.0 + 30.0)
    rows = merit_rows() + [late]  # the anomaly after ten valid rows
    derived = derive_bounds(LINKED, ops.ops, rows)
    assert derived["outcome_deadline_seconds"]["value"] < 30.0
    result = check_jobs([], _ledgers(rows), CheckOptions.from_dict(apply_bounds({}, derived)))
    assert result.valid is False
    assert [e["operation_id"] for e in result.examples["deadline_exceeded"]] == ["merit-late"]


def test_a_restart_outside_the_nemesis_windows_of_that_same_worker_is_still_counted():
    kill_1 = bounds_module.KillWindow("worker_merit_1", "merit", T0 + 1.0, T0 + 3.0)
    kill_2 = bounds_module.KillWindow("worker_merit_2", "merit", T0 + 5.0, T0 + 8.0)
    never = bounds_module.KillWindow("worker_ai_1", "ai", T0 + 5.0, None)
    lifetimes = {"worker_merit_1": [(T0, T0 + 0.9), (T0 + 2.9, T0 + 6.0), (T0 + 7.0, T0 + 9.0)],
                 "worker_ai_1": [(T0, T0 + 6.0), (T0 + 7.0, T0 + 9.0)]}
    windows = bounds_module.restart_windows(lifetimes, [kill_1, kill_2, never])
    # merit_1's first restart is kill_1's; its second (6 -> 7) falls in merit_2's kill, not its own;
    # ai_1's restart is inside its own window that never ended
    assert [(w.target, w.start, w.end) for w in windows] == [("worker_merit_1", T0 + 6.0, T0 + 7.0)]


def test_a_successor_that_wrote_before_its_predecessors_last_line_is_no_restart_window():
    # measured under a partition (valkey_partition seed 20261014): the exiting AI worker's horse
    # wrote its last line 0.5 s after the restarted worker's first; the reversed window that gave
    # hung queue_ahead's restart-after-a-span loop
    lifetimes = {"worker_ai_1": [(T0, T0 + 8.61), (T0 + 8.1, T0 + 37.0)],
                 "worker_merit_1": [(T0, T0 + 1.0), (T0 + 2.5, T0 + 9.0)]}
    windows = bounds_module.restart_windows(lifetimes, [])
    assert [(w.target, w.start, w.end) for w in windows] == [("worker_merit_1", T0 + 1.0, T0 + 2.5)]


@pytest.mark.timeout(10)
def test_queue_ahead_ignores_an_empty_or_reversed_span_and_always_ends():
    created = [0.0, 0.1, 0.2, 3.5]
    assert bounds_module.queue_ahead(created, 1.0, [(0.5, 3.0), (8.6, 8.1)]) == 3  # as with (0.5, 3.0) alone
    assert bounds_module.queue_ahead([0.0, 0.1], 0.73, [(0.3, 0.3), (0.5, 0.4)]) == 1  # nothing down at all


def test_a_toxic_end_without_its_start_opens_no_window():
    ops = Ops()
    toxic(ops, 0, "valkey_workers", 1.0, 2.0)
    ops.add("nemesis", "fault-end", {"fault_id": 7, "kind": "toxic", "target": "valkey_relay"}, 3.0)
    assert {(w.target, w.end) for w in bounds_module.link_windows(ops.ops, T0)} == {("valkey_workers", T0 + 2.0)}


# ------------------------------------------------------------ a lane that queues with no kill
def ai_rows(count: int, spacing: float, pace: float) -> list[OutboxRow]:
    """AI jobs created every ``spacing`` s and served one after another, ``pace`` s each (a lane
    slower than its arrivals queues up: each waits for the ones before it)."""
    rows, free = [], T0
    for i in range(count):
        created = T0 + i * spacing
        done = max(free, created + 0.05) + pace
        rows.append(OutboxRow(operation_id=f"narrative-a{i}", attempt_id=f"a{i}", kind="narrative", status="done",
                              attempts=1, created_at=created, enqueued_at=created + 0.05, done_at=done))
        free = done
    return rows


def provider_fault(ops: Ops, fault_id: int, start: float, end: float, **knobs: float) -> None:
    value = {"fault_id": fault_id, "kind": "provider", "target": "ai_provider", **knobs}
    ops.add("nemesis", "fault-start", value, start)
    ops.add("nemesis", "fault-end", value, end)


def test_a_lane_slower_than_its_arrivals_counts_the_queue_ahead_of_its_last_job():
    # 20 jobs every 0.5 s, 0.7 s each: job i starts at 0.7 i, so the last arrives (9.5 s) with
    # the jobs still ahead that started after 9.5 - 0.7 (13 and on) or not yet: 6 of them
    rows = ai_rows(20, 0.5, 0.7)
    lanes = derive_bounds(SCENARIO, [], rows)["outcome_deadline_seconds"]["terms"]["lanes"]
    assert lanes["ai"]["per_job"] == pytest.approx(0.7)
    assert lanes["ai"]["cluster_backlog"] == 0 and lanes["ai"]["queue_ahead"] == 6
    assert lanes["ai"]["backlog"] == 6
    # the real last job waited behind those 6: it is inside the bound
    deadline = derive_bounds(SCENARIO, [], rows)["outcome_deadline_seconds"]["value"]
    assert max(r.done_at - r.created_at for r in rows) < deadline
    assert deadline == pytest.approx(0.5 + (1 + lanes["ai"]["burst"] + 6) * 0.7)


def test_queue_ahead_serves_nothing_while_the_lane_is_down_and_restarts_an_interrupted_job():
    created = [0.0, 0.1, 0.2]
    assert bounds_module.queue_ahead(created, 1.0, []) == 2
    # down from 0.5 to 3.0: job 0 (0 to 1) is interrupted and starts again at 3.0
    assert bounds_module.queue_ahead(created + [3.5], 1.0, [(0.5, 3.0)]) == 3
    assert bounds_module.queue_ahead(created + [3.5], 1.0, []) == 2  # the most was at 0.2, the last sees none
    # a job arriving inside a down span waits for its end
    assert bounds_module.queue_ahead([1.0, 2.5], 1.0, [(0.5, 3.0)]) == 1


def test_a_provider_faults_declared_slowdown_costs_each_job_it_starts_inside():
    ops = Ops()
    provider_fault(ops, 0, 1.0, 5.0, delay_after_effect_seconds=1.0)
    provider_fault(ops, 1, 6.0, 7.0)  # a fault that slows nothing (a status, say) is no window
    windows = bounds_module.slow_windows(ops.ops, T0)
    assert windows == [bounds_module.SlowWindow("ai", T0 + 1.0, T0 + 5.0, 1.0)]
    created = [T0 + i * 0.5 for i in range(12)]
    fast = bounds_module.queue_ahead(created, 0.4, [])
    slow = bounds_module.queue_ahead(created, 0.4, [], windows)
    assert fast == 0 and slow > 3


def test_a_provider_fault_never_ended_lasts_to_the_last_op_and_an_sms_fault_slows_the_sms_lane():
    ops = Ops()
    ops.add("nemesis", "fault-start", {"fault_id": 0, "kind": "provider", "target": "sms_gateway",
                                       "latency_seconds": 0.5}, 2.0)
    ops.add("client", "answer", {}, 9.0)
    assert bounds_module.slow_windows(ops.ops, T0) == [bounds_module.SlowWindow("sms", T0 + 2.0, T0 + 9.0, 0.5)]


def test_a_stall_beyond_the_queue_the_arrivals_explain_is_still_caught():
    rows = ai_rows(20, 0.5, 0.7)
    late = OutboxRow(operation_id="narrative-late", attempt_id="late", kind="narrative", status="done", attempts=1,
                     created_at=T0 + 10.0, enqueued_at=T0 + 10.05, done_at=T0 + 10.0 + 20.0)  # after the valid ones
    derived = derive_bounds(SCENARIO, [], rows + [late])
    result = check_jobs([], _ledgers(rows + [late]), CheckOptions.from_dict(apply_bounds({}, derived)))
    assert result.valid is False
    assert [e["operation_id"] for e in result.examples["deadline_exceeded"]] == ["narrative-late"]


def test_only_the_nemesis_provider_faults_slow_a_lane_whatever_ops_come_before_them():
    ops = Ops()
    slowing = {"kind": "provider", "target": "ai_provider", "latency_seconds": 3.0}
    ops.add("client", "fault-start", {"fault_id": 7, **slowing}, 0.5)  # not the nemesis's
    ops.add("nemesis", "fault-start", {"fault_id": 8, **slowing, "kind": "toxic"}, 0.6)  # not a provider fault
    ops.add("nemesis", "fault-start", {"fault_id": 9, **slowing, "target": "web_1"}, 0.7)  # no provider of a lane
    provider_fault(ops, 0, 1.0, 5.0, latency_seconds=0.5)
    assert bounds_module.slow_windows(ops.ops, T0) == [bounds_module.SlowWindow("ai", T0 + 1.0, T0 + 5.0, 0.5)]


def test_queue_ahead_counts_a_job_served_by_an_arrivals_time_as_gone():
    # each job ends the moment the next arrives: never one ahead
    assert bounds_module.queue_ahead([T0, T0 + 1.0, T0 + 2.0], 1.0, []) == 0
    # three at once, then two more at 1.5 s when one of the three is done: the last has three ahead
    assert bounds_module.queue_ahead([T0, T0, T0, T0 + 1.5, T0 + 1.5], 1.0, []) == 3


def test_a_job_interrupted_inside_a_slow_window_pays_the_slowdown_again_after_the_span():
    slow = [bounds_module.SlowWindow("ai", T0, T0 + 10.0, 1.0)]
    # starts at 1.5, cut at 2, restarts at 3 and takes 1 + 1 s: still running when the next arrives at 4.5
    assert bounds_module.queue_ahead([T0 + 1.5, T0 + 4.5], 1.0, [(T0 + 2.0, T0 + 3.0)], slow) == 1


def test_down_spans_that_touch_are_one_span_a_job_cannot_run_through():
    # cut at 1 by the first span, it must not restart at 2 inside the second: it restarts at 3, done at 4
    assert bounds_module.queue_ahead([T0 + 0.5, T0 + 3.5], 1.0, [(T0 + 1.0, T0 + 2.0), (T0 + 2.0, T0 + 3.0)]) == 1


def test_a_slow_window_slows_a_job_starting_on_its_first_instant_not_on_its_end():
    slow = [bounds_module.SlowWindow("ai", T0 + 1.0, T0 + 2.0, 5.0)]
    assert bounds_module.queue_ahead([T0 + 1.0, T0 + 3.0], 1.0, [], slow) == 1  # 1.0 to 7.0: still ahead at 3
    assert bounds_module.queue_ahead([T0 + 2.0, T0 + 3.0], 1.0, [], slow) == 0  # 2.0 to 3.0: done at 3
    # a job a span interrupted restarts at the span's end, slowed by a window starting there, not by one ending there
    down = [(T0 + 1.5, T0 + 3.0)]
    starting = [bounds_module.SlowWindow("ai", T0 + 3.0, T0 + 4.0, 5.0)]
    ending = [bounds_module.SlowWindow("ai", T0 + 2.0, T0 + 3.0, 5.0)]
    assert bounds_module.queue_ahead([T0 + 1.0, T0 + 5.0], 1.0, down, starting) == 1  # 3.0 to 9.0
    assert bounds_module.queue_ahead([T0 + 1.0, T0 + 4.0], 1.0, down, ending) == 0  # 3.0 to 4.0


def test_a_span_starting_as_a_job_ends_does_not_interrupt_it_and_one_starting_at_an_arrival_holds_it():
    assert bounds_module.queue_ahead([T0, T0 + 1.0], 1.0, [(T0 + 1.0, T0 + 2.0)]) == 0
    assert bounds_module.queue_ahead([T0 + 1.0, T0 + 2.5], 1.0, [(T0 + 1.0, T0 + 2.0)]) == 1  # 2.0 to 3.0
