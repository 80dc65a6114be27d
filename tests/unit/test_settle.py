"""The derived settle wait (chaos/settle.py): its plan from the run, and how the wait ends.

The wait runs on a fake clock: each poll advances it, and the outbox it reads is scripted
per poll, so the stall, the cap and the not-before extension are shown exactly.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from chaos.settle import CAP_MULTIPLE, FORMULA, UNREADABLE_FOR, SettleTerms, plan_settle, settle_markdown, wait_to_settle

TERMS = SettleTerms(time_scale=0.01, relay_interval=0.5, liveness_ttl=3.0, ai_calls_per_minute=8,
                    case_service={"merit": 0.34, "ai": 10.0, "sms": 0.5}, case_backoff_max=900.0)
NOW = 1000.0


def row(op: str, kind: str, status: str, *, created: float = 900.0, enqueued: float | None = None,
        done: float | None = None, attempts: int = 1, not_before: float | None = None) -> dict[str, Any]:
    return {"operation_id": op, "attempt_id": op.split("-", 1)[1], "kind": kind, "status": status, "attempts": attempts,
            "job_id": f"{op}-{attempts}", "created_at": created, "enqueued_at": enqueued or created, "done_at": done,
            "not_before": not_before}


def busy_lane(kind: str, jobs: int, gap: float, start: float = 900.0) -> list[dict[str, Any]]:
    """Done rows of a lane that was busy: each next job already waited when the previous one finished."""
    return [row(f"{kind}-d{n}", kind, "done", created=start, enqueued=start, done=start + (n + 1) * gap)
            for n in range(jobs)]


def test_the_plan_drains_each_lane_backlog_at_its_measured_pace() -> None:
    rows = (busy_lane("merit", 5, 0.02) + busy_lane("narrative", 5, 0.2) + busy_lane("sms", 5, 0.05)
            + [row(f"merit-o{n}", "merit", "enqueued") for n in range(10)]
            + [row(f"narrative-o{n}", "narrative", "pending") for n in range(40)]
            + [row(f"sms-o{n}", "sms", "enqueued") for n in range(20)])
    plan = plan_settle(rows, TERMS, NOW)
    assert plan.lanes["merit"] == {"backlog": 10, "per_job": 0.02, "per_job_from": "median of 4 completion gaps while jobs waited",
                                   "waiting": 0.0, "drain": 0.2, "stall_after": 4.04}
    assert plan.lanes["ai"]["per_job"] == 0.2 and plan.lanes["ai"]["drain"] == 8.0
    assert plan.lanes["ai"]["stall_after"] == pytest.approx(4.0 + 0.4 + 9.0)  # + the longest case backoff x scale
    assert plan.lanes["sms"]["drain"] == 1.0
    assert plan.expected == pytest.approx(0.5 + 0.2 + 8.0)  # merit first, then the slower of ai and sms
    assert plan.cap == pytest.approx(CAP_MULTIPLE * plan.expected)


def test_the_ai_lane_never_drains_faster_than_the_provider_limit() -> None:
    rows = busy_lane("narrative", 5, 0.01) + [row(f"narrative-o{n}", "narrative", "enqueued") for n in range(584)]
    plan = plan_settle(rows, TERMS, NOW)
    assert plan.lanes["ai"]["per_job"] == pytest.approx(0.075)  # 60 s x 0.01 / 8 calls
    assert plan.lanes["ai"]["drain"] == pytest.approx(43.8)  # the 584 narratives: at least 44 s
    assert "provider limit" in plan.lanes["ai"]["per_job_from"]


def test_a_lane_without_a_done_job_assumes_its_case_service_time() -> None:
    plan = plan_settle([row(f"sms-o{n}", "sms", "enqueued") for n in range(4)], TERMS, NOW)
    assert plan.lanes["sms"]["per_job"] == 0.005 and plan.lanes["sms"]["drain"] == 0.02
    assert plan.lanes["sms"]["per_job_from"].startswith("no done job")


def test_waiting_rows_add_their_not_before_and_allowed_kinds_are_not_waited_for() -> None:
    rows = [row("narrative-a1", "narrative", "pending", not_before=NOW + 7.5), row("sms-a1", "sms", "enqueued")]
    plan = plan_settle(rows, TERMS, NOW, allow_pending=frozenset({"sms"}))
    assert plan.lanes["ai"]["waiting"] == 7.5 and plan.lanes["ai"]["drain"] == pytest.approx(7.5 + 0.1)
    assert plan.lanes["sms"]["backlog"] == 0


class Script:
    """A fake clock and an outbox that changes as a function of the time."""

    def __init__(self, outbox: Callable[[float], list[dict[str, Any]] | None], poll: float = 0.25) -> None:
        self.now, self.poll, self.outbox, self.reads = NOW, poll, outbox, 0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def read(self) -> list[dict[str, Any]] | None:
        self.reads += 1
        return self.outbox(self.now)

    def wait(self, **kwargs: Any):
        return wait_to_settle(self.read, TERMS, clock=self.clock, sleep=self.sleep, poll=self.poll, **kwargs)


def draining(total: int, per_second: float, kind: str = "merit") -> Callable[[float], list[dict[str, Any]]]:
    """An outbox whose ``total`` open rows finish at ``per_second`` from NOW on."""
    def outbox(now: float) -> list[dict[str, Any]]:
        finished = min(total, int((now - NOW) * per_second))
        return ([row(f"{kind}-a{n}", kind, "done", done=NOW + n / per_second) for n in range(finished)]
                + [row(f"{kind}-a{n}", kind, "enqueued") for n in range(finished, total)])
    return outbox


def test_a_draining_lane_settles_without_a_fixed_bound() -> None:
    """No done job at first: the case service time underestimates the lane (cap 13.2 s for 20 s
    of drain); the completions during the wait derive the cap again."""
    result = Script(draining(40, 2.0)).wait()
    assert result.plan.cap < 20.0
    assert result.settled and result.ended_by == "settled" and result.still_open == 0
    assert result.waited == pytest.approx(20.0, abs=0.3)
    assert result.rederived == 40  # one poll for each of the 40 completions: 2 a second, polled 4 times a second


def test_a_lane_making_no_progress_ends_the_wait_after_its_stall_interval() -> None:
    """Negative control: a lost job that nothing re-enqueues; the wait stops at once, not at the cap."""
    def outbox(now: float) -> list[dict[str, Any]]:
        done = draining(8, 4.0)(now)[:-1]  # the last job never finishes
        return done + [row("merit-lost", "merit", "enqueued")]
    result = Script(outbox).wait()
    assert not result.settled and result.ended_by == "stalled" and result.stalled_lanes == ["merit"]
    stall = result.plan.stall_after("merit")
    assert result.waited == pytest.approx(7 / 4.0 + stall, abs=0.3)  # the last change, then one stall interval
    assert result.waited < result.plan.cap or result.plan.cap == pytest.approx(stall)


def test_progress_that_never_ends_stops_at_the_cap() -> None:
    """A lane that keeps changing without finishing (a job re-enqueued forever): the cap ends it."""
    def outbox(now: float) -> list[dict[str, Any]]:
        return [row("merit-a1", "merit", "enqueued", attempts=1 + int(now - NOW))]
    result = Script(outbox).wait()
    assert result.ended_by == "cap" and not result.settled
    assert result.waited == pytest.approx(result.plan.cap, abs=0.3)


def test_a_not_before_set_during_the_wait_moves_the_stall_and_the_cap() -> None:
    """The provider asked the lane to wait 30 s (a Retry-After): that is no stall, and the cap follows it."""
    def outbox(now: float) -> list[dict[str, Any]]:
        if now < NOW + 1:
            return [row("narrative-a1", "narrative", "enqueued")]
        if now < NOW + 31:
            return [row("narrative-a1", "narrative", "pending", not_before=NOW + 31)]
        return [row("narrative-a1", "narrative", "done", done=now)]
    result = Script(outbox).wait()
    assert result.settled and result.waited == pytest.approx(31.0, abs=0.3)


def test_an_explicit_timeout_replaces_the_rule() -> None:
    def outbox(now: float) -> list[dict[str, Any]]:
        return [row("merit-lost", "merit", "enqueued")]
    result = Script(outbox).wait(explicit_timeout=12.0)
    assert result.ended_by == "timeout" and result.waited == 12.0  # the poll that reaches it ends it (0.25 s steps)
    assert result.as_dict()["explicit_timeout"] == 12.0
    assert "An explicit timeout of 12.0 s replaced the derived rule." in settle_markdown(result.as_dict())


def test_an_outbox_never_read_gives_up_without_a_plan() -> None:
    result = Script(lambda now: None).wait()
    assert result.ended_by == "no outbox read" and result.plan is None and result.still_open == -1
    assert result.waited == UNREADABLE_FOR and result.rederived == 0


def test_unreadable_polls_after_the_plan_do_not_count_as_progress() -> None:
    def outbox(now: float) -> list[dict[str, Any]] | None:
        return None if int((now - NOW) * 4) % 2 else [row("merit-lost", "merit", "enqueued")]
    result = Script(outbox).wait()
    assert result.ended_by == "stalled"
    assert result.waited == pytest.approx(result.plan.stall_after("merit"), abs=0.5)  # stalls show on a read only


def test_the_report_section_shows_why_it_stopped_and_every_term() -> None:
    result = Script(lambda now: [row("merit-lost", "merit", "enqueued")]).wait()
    lines = settle_markdown(result.as_dict())
    text = "\n".join(lines)
    assert lines[0] == "## Settle wait (derived)"
    assert "**stalled** (lanes merit made no progress)" in text and "1 outbox rows open" in text
    assert FORMULA in text and "'provider_interval': 0.075" in text and "merit: {'backlog': 1" in text
    assert settle_markdown(None) == []
