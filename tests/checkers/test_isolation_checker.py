"""The lane-isolation checker (chaos/checkers/isolation.py) on hand-written job records.

Each breach is planted AFTER valid jobs, so a checker that looked only at the first jobs
would miss it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.checkers.isolation import LANE_JOBS_FILE, LaneJob, check_isolation, isolation_from_run, merit_wait_bound


def merit(n: int, enqueued: float, started: float | None, ended: float | None, worker: str = "worker_merit_1.1",
          queue: str = "merit") -> LaneJob:
    return LaneJob(f"merit-a{n}-1", "merit", queue, worker if started is not None else None, enqueued, started, ended)


def ai(n: int, started: float, ended: float | None, worker: str = "worker_ai_1.1", queue: str = "ai") -> LaneJob:
    return LaneJob(f"narrative-b{n}-1", "narrative", queue, worker, 0.0, started, ended)


def isolated() -> list[LaneJob]:
    """Merit jobs every 0.2 s, each 0.01 s to start and 0.01 s to run; AI busy throughout."""
    jobs = [merit(n, 10 + 0.2 * n, 10 + 0.2 * n + 0.01, 10 + 0.2 * n + 0.02) for n in range(10)]
    return jobs + [ai(n, 10 + 0.1 * n, 10 + 0.1 * n + 0.1) for n in range(20)]


def test_separate_lanes_under_a_busy_ai_lane_are_valid() -> None:
    result = check_isolation(isolated(), observed_at=20.0, merit_workers=2)
    assert result.valid is True, result.to_dict()
    assert result.counts["waited_behind_ai"] == 0 and result.counts["wait_over_bound"] == 0
    assert result.details["ai_jobs_overlapping_merit"] > 0


def test_an_ai_job_taken_from_the_merit_queue_while_merit_waited_is_reported() -> None:
    # after the valid jobs: a merit job queued at 13.0 on a shared queue, an AI job from that
    # queue starts at 13.05 on a merit worker, the merit job starts only when it ended
    shared = [ai(99, 13.05, 13.5, worker="worker_merit_2.7", queue="merit"),
              merit(50, 13.0, 13.51, 13.52, worker="worker_merit_2.7")]
    result = check_isolation(isolated() + shared, observed_at=20.0, merit_workers=2)
    assert result.valid is False
    assert result.examples["waited_behind_ai"][0]["merit_job"] == "merit-a50-1"
    assert result.counts["wait_over_bound"] >= 1  # 0.51 s against (2 + burst) * 0.02 s


def test_a_merit_job_still_queued_when_observed_counts_its_wait_as_a_lower_bound() -> None:
    stuck = [ai(98, 14.0, None, worker="worker_merit_1.1", queue="merit"), merit(60, 13.9, None, None)]
    result = check_isolation(isolated() + stuck, observed_at=19.9, merit_workers=2)
    assert result.valid is False
    assert result.details["never_started"] == 1
    assert result.examples["wait_over_bound"][0] == {"merit_job": "merit-a60-1", "waited": 6.0,
                                                    "bound": result.details["bound"]["value"], "slowdown": 1.0,
                                                    "started": False}


def test_a_slow_merit_lane_without_any_ai_job_breaks_only_the_bound() -> None:
    late = [merit(70, 15.0, 17.0, 17.01)]  # two seconds in its own queue, nobody in front
    result = check_isolation(isolated() + late, observed_at=20.0, merit_workers=2)
    assert result.violations == ["wait_over_bound"]


def test_an_idle_ai_lane_proves_nothing() -> None:
    only_merit = [j for j in isolated() if j.kind == "merit"]
    result = check_isolation(only_merit, observed_at=20.0, merit_workers=2)
    assert result.valid == "unknown"
    assert any("not exercised" in note for note in result.notes)


def test_no_merit_job_ran_leaves_the_bound_underivable() -> None:
    jobs = [merit(1, 10.0, None, None), ai(1, 10.5, 11.0, queue="ai")]
    assert merit_wait_bound(jobs, 2)["value"] is None
    assert check_isolation(jobs, observed_at=12.0, merit_workers=2).valid == "unknown"


def test_the_bound_is_the_merit_oldest_formula_with_measured_terms() -> None:
    bound = merit_wait_bound(isolated(), workers=2)
    assert bound["terms"]["per_job"] == pytest.approx(0.02)
    assert bound["value"] == pytest.approx((2 + bound["terms"]["burst"]) * 0.02)


def test_a_run_folder_without_records_or_with_a_bad_spec_is_unknown(tmp_path: Path) -> None:
    assert isolation_from_run(tmp_path, {"merit_workers": 2}).valid == "unknown"
    (tmp_path / LANE_JOBS_FILE).write_text(json.dumps({"table": "outbox", "exported_at": 1.0, "rows": []}))
    assert "lane_jobs" in isolation_from_run(tmp_path, {"merit_workers": 2}).notes[0]
    assert "merit_workers" in isolation_from_run(tmp_path, {"merit_workers": 0}).notes[0]


# ---------------------------------------------------------------- mutation survivors (#22 part 5)
def behind(*extra: LaneJob) -> list[str]:
    """The merit jobs reported waiting behind an AI job, after the valid prefix."""
    result = check_isolation(isolated() + list(extra), observed_at=30.0, merit_workers=2)
    return [e["merit_job"] for e in result.examples.get("waited_behind_ai", [])]


def test_an_ai_job_on_a_merit_jobs_worker_from_another_queue_took_its_place() -> None:
    """A worker serving both queues (the seed's shared lane) starts an AI job while merit waits."""
    assert behind(merit(80, 21.0, 21.6, 21.61, worker="w-shared"), ai(80, 21.2, 21.5, worker="w-shared")) == ["merit-a80-1"]
    # the same AI job on another worker and queue took nothing from it
    assert behind(merit(80, 21.0, 21.6, 21.61, worker="w-shared"), ai(80, 21.2, 21.5, worker="w-other")) == []


def test_the_window_of_taking_its_place_includes_the_enqueue_and_excludes_the_start() -> None:
    at_enqueue = ai(81, 21.0, 21.05, worker="w-ai", queue="merit")
    assert behind(merit(81, 21.0, 21.6, 21.61, worker="w-m"), at_enqueue) == ["merit-a81-1"]
    at_start = ai(81, 21.6, 21.7, worker="w-ai", queue="merit")
    assert behind(merit(81, 21.0, 21.6, 21.61, worker="w-m"), at_start) == []
    queued_only = LaneJob("narrative-b81-1", "narrative", "merit", "w-ai", 0.0, None, None)
    assert behind(merit(81, 21.0, 21.6, 21.61, worker="w-m"), queued_only) == []


def test_an_ai_job_that_held_the_merit_jobs_worker_past_its_enqueue_kept_it_waiting() -> None:
    held = ai(82, 20.5, 21.3, worker="w-shared", queue="ai")  # started before merit arrived, ended after
    assert behind(merit(82, 21.0, 21.4, 21.41, worker="w-shared"), held) == ["merit-a82-1"]
    ended_at_enqueue = ai(82, 20.5, 21.0, worker="w-shared", queue="ai")
    assert behind(merit(82, 21.0, 21.4, 21.41, worker="w-shared"), ended_at_enqueue) == []
    ended_at_start = ai(82, 20.5, 21.4, worker="w-shared", queue="ai")
    assert behind(merit(82, 21.0, 21.4, 21.41, worker="w-shared"), ended_at_start) == ["merit-a82-1"]


def test_a_merit_job_never_started_shares_no_worker_with_an_ai_job_that_names_none() -> None:
    unnamed = LaneJob("narrative-b83-1", "narrative", "ai", None, 0.0, 21.2, 21.5)
    assert behind(merit(83, 21.0, None, None), unnamed) == []


def test_pickups_skip_other_kinds_and_take_only_this_workers_previous_ends() -> None:
    # an AI job listed first on the merit worker: the pickup of the merit job after it counts
    # from the AI job's end, and the scan goes on past the AI job to the merit jobs after it
    jobs = [ai(84, 9.0, 9.95, worker="worker_merit_1.1", queue="merit"), *isolated()]
    bound = merit_wait_bound([j for j in jobs if j.kind == "merit"] + [jobs[0]], 2)
    assert bound["terms"]["measured_jobs"] == 10 and bound["terms"]["pickup"] == 0.01


def test_parse_lane_jobs_names_what_is_wrong() -> None:
    from chaos.checkers.isolation import parse_lane_jobs

    row = {"job_id": "merit-a1-1", "kind": "merit", "queue": "merit", "worker": "w", "enqueued_at": 1.0,
           "started_at": 1.1, "ended_at": 1.2}
    jobs, observed = parse_lane_jobs({"table": "lane_jobs", "exported_at": 5, "rows": [row]})
    assert observed == 5.0 and jobs == [LaneJob("merit-a1-1", "merit", "merit", "w", 1.0, 1.1, 1.2)]
    assert parse_lane_jobs({"table": "lane_jobs", "exported_at": 5.0, "rows": None}) == ([], 5.0)
    for document, field in (({"table": "lane_jobs", "exported_at": "5"}, "exported_at"),
                            ({"table": "lane_jobs", "exported_at": 5, "rows": [row, ["merit-a2-1"]]}, r"rows\[1\]"),
                            ({"table": "lane_jobs", "exported_at": 5, "rows": [row, {**row, "job_id": 7}]}, r"rows\[1\]")):
        with pytest.raises(ValueError, match=field):
            parse_lane_jobs(document)


def test_one_merit_worker_is_a_valid_spec(tmp_path: Path) -> None:
    rows = [{"job_id": j.job_id, "kind": j.kind, "queue": j.queue, "worker": j.worker, "enqueued_at": j.enqueued_at,
             "started_at": j.started_at, "ended_at": j.ended_at} for j in isolated()]
    (tmp_path / LANE_JOBS_FILE).write_text(json.dumps({"table": "lane_jobs", "exported_at": 30.0, "rows": rows}))
    assert isolation_from_run(tmp_path, {"merit_workers": 1}).valid is True
    assert isolation_from_run(tmp_path, {"merit_workers": 0}).valid == "unknown"


def test_pickups_go_past_a_merit_job_not_started_and_one_still_running() -> None:
    """Listed first: one merit job never started, one still running (no end yet on its worker);
    the pickups of the ten after them are still measured, from ends that exist."""
    waiting = merit(90, 9.0, None, None)
    running = merit(91, 9.0, 9.5, None, worker="worker_merit_1.1")
    bound = merit_wait_bound([waiting, running, *[j for j in isolated() if j.kind == "merit"]], 2)
    assert bound["terms"]["measured_jobs"] == 10 and bound["terms"]["pickup"] == 0.01


# ---------------------------------------------------------------- second run's survivors (#22 part 5)
def test_a_pickup_counts_from_the_workers_previous_end_even_at_the_exact_start() -> None:
    """The second merit job queued behind the first on one worker: its pickup starts at the
    first one's end, which is the very instant it started (0, not the 0.375 s it was queued)."""
    first = merit(1, 10.0, 10.0, 10.5, worker="w1")
    second = merit(2, 10.125, 10.5, 11.0, worker="w1")
    assert merit_wait_bound([first, second], 1)["terms"]["pickup"] == 0.0


def test_the_burst_counts_merit_arrivals_within_one_per_job_times_workers() -> None:
    """One more merit job 0.01 s after another (window 2 * 0.02 s): a burst of 2, in the bound."""
    close = merit(11, 10.21, 10.23, 10.24)
    bound = merit_wait_bound([*isolated(), close], workers=2)
    assert bound["terms"]["burst"] == 2
    assert bound["value"] == pytest.approx((2 + 2) * 0.02)


def _dyadic_lane(*extra: LaneJob) -> list[LaneJob]:
    """Three merit jobs, each 0.125 s to pick up and 0.125 s to run (exact in binary), an AI job
    beside them on its own lane: with one worker the bound is (1 + 1) * 0.25 = 0.5 s exactly."""
    jobs = [merit(n, 16.0 + n, 16.125 + n, 16.25 + n, worker="w") for n in range(3)]
    return jobs + [ai(1, 16.1, 16.2, worker="w-ai"), *extra]


def test_a_wait_exactly_at_the_bound_is_within_it() -> None:
    at_bound = merit(3, 19.0, 19.5, 19.625, worker="w2")  # waited 0.5 s; medians stay 0.125 s
    result = check_isolation(_dyadic_lane(at_bound), observed_at=30.0, merit_workers=1)
    assert result.details["bound"]["value"] == 0.5 and result.details["merit_wait"]["max"] == 0.5
    assert result.valid is True and result.counts["wait_over_bound"] == 0, result.to_dict()


def test_the_report_rounds_the_bound_its_terms_and_the_waits_to_a_tenth_of_a_millisecond() -> None:
    """Microsecond times: execution 0.05678 s, pickup 0.01234 s; a merit job that waited
    1.234567 s while an AI job took its queue is behind AI and over the bound."""
    jobs = [merit(n, 10.0 + n, 10.01234 + n, 10.06912 + n, worker="w") for n in range(3)]
    late = merit(9, 20.0, 21.234567, 21.29, worker="w")
    taker = ai(9, 20.5, 21.0, worker="w-x", queue="merit")
    result = check_isolation([*jobs, late, taker], observed_at=30.0, merit_workers=1)
    bound = result.details["bound"]
    assert {key: bound["terms"][key] for key in ("execution", "pickup", "per_job")} == \
        {"execution": 0.0568, "pickup": 0.0123, "per_job": 0.0691}
    assert bound["value"] == 0.1382  # (1 + 1) * 0.06912
    assert result.examples["waited_behind_ai"][0]["waited"] == 1.2346
    assert result.examples["wait_over_bound"][0]["waited"] == 1.2346


def test_ai_jobs_overlapping_merit_are_counted_exactly_with_touching_edges_included() -> None:
    """Merit queued at 10 and done at 11. AI jobs: one starting at 11.0 and one ending at 10.0
    (touching: counted), one after and one before (not), one never started (not)."""
    jobs = [merit(1, 10.0, 10.5, 11.0, worker="w-m"),
            ai(1, 11.0, 11.5), ai(2, 9.0, 10.0), ai(3, 12.0, 12.5), ai(4, 5.0, 6.0),
            LaneJob("narrative-b5-1", "narrative", "ai", None, 0.0, None, None)]
    result = check_isolation(jobs, observed_at=20.0, merit_workers=1)
    assert result.details["ai_jobs_overlapping_merit"] == 2
    assert result.valid is True, result.to_dict()


# ---------------------------------------------------------------- a busy machine's slow moment (rehearsal run 43)
def _stall(at: float) -> list[LaneJob]:
    """After the valid jobs: both merit workers run a job ten times the median (0.2 s against 0.01 s)
    from ``at``, and a merit job queued 0.02 s later waits for one of them and picks up slowly: 0.28 s,
    against a plain bound of (2 + 1) * 0.02 = 0.06 s."""
    return [merit(80, at, at + 0.01, at + 0.21, worker="w1"), merit(81, at, at + 0.01, at + 0.21, worker="w2"),
            merit(82, at + 0.02, at + 0.30, at + 0.31, worker="w1")]


def test_a_wait_behind_merit_jobs_a_busy_moment_slowed_is_within_the_slowed_bound() -> None:
    result = check_isolation(isolated() + _stall(16.0), observed_at=20.0, merit_workers=2)
    assert result.valid is True and result.counts["wait_over_bound"] == 0, result.to_dict()
    assert result.details["merit_wait"]["max"] == pytest.approx(0.28)


def test_a_slow_moment_elsewhere_does_not_excuse_a_wait() -> None:
    """The same slow jobs two seconds before a wait that no merit job ran beside: over the plain bound."""
    late = merit(83, 18.0, 18.28, 18.29, worker="w3")  # 0.28 s, no merit job running beside it
    result = check_isolation(isolated() + _stall(16.0)[:2] + [late], observed_at=20.0, merit_workers=2)
    assert result.violations == ["wait_over_bound"], result.to_dict()
    assert result.examples["wait_over_bound"][0]["merit_job"] == "merit-a83-1"
    assert result.examples["wait_over_bound"][0]["slowdown"] == 1.0


def test_a_wait_cannot_excuse_itself_with_its_own_slow_execution() -> None:
    late = merit(84, 18.0, 18.28, 20.28, worker="w3")  # waited 0.28 s, then ran 2 s: only others count
    result = check_isolation(isolated() + [late], observed_at=30.0, merit_workers=2)
    assert result.violations == ["wait_over_bound"], result.to_dict()


def test_a_slowed_bound_and_its_slowdown_are_reported_rounded() -> None:
    """A merit job ran 3.777 times the median (0.01 s) while another waited 0.88 s: over even the
    slowed bound, (2 + 2) * 0.02 * 3.777 = 0.30216 s, reported as 0.3022 with a slowdown of 3.78."""
    slow = merit(85, 17.0, 17.01, 17.04777, worker="w1")
    late = merit(86, 17.02, 17.9, 17.91, worker="w2")
    result = check_isolation(isolated() + [slow, late], observed_at=20.0, merit_workers=2)
    assert result.details["bound"]["value"] == 0.08
    assert result.examples["wait_over_bound"][0] == {"merit_job": "merit-a86-1", "waited": 0.88, "bound": 0.3022,
                                                    "slowdown": 3.78, "started": True}


def test_a_merit_job_that_ended_as_the_wait_began_did_not_run_beside_it() -> None:
    """Exact in binary: a slow job (0.5 s, the median 0.125 s) ends at the very instant the late job is
    queued, so the late job's 0.75 s wait has only the plain bound (1 + 1) * 0.25 = 0.5 s."""
    slow = merit(87, 19.0, 19.25, 19.75, worker="w")
    late = merit(88, 19.75, 20.5, 20.625, worker="w2")
    result = check_isolation(_dyadic_lane(slow, late), observed_at=30.0, merit_workers=1)
    assert result.examples["wait_over_bound"][0]["slowdown"] == 1.0, result.to_dict()


def test_merit_jobs_that_took_no_time_leave_the_slowdown_at_one() -> None:
    """Every execution 0 s (a coarse clock): the median is 0, and no ratio can be taken, not even of
    the job that ran while the late one waited."""
    instant = [merit(n, 10.0 + n, 10.5 + n, 10.5 + n, worker="w") for n in range(3)]
    instant.append(merit(5, 20.5, 21.0, 21.0, worker="w"))
    late = merit(9, 20.0, 22.0, 22.0, worker="w2")
    result = check_isolation(instant + [ai(1, 20.5, 21.0, worker="w-ai"), late], observed_at=30.0, merit_workers=1)
    assert result.examples["wait_over_bound"][0]["slowdown"] == 1.0, result.to_dict()
