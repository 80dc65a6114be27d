"""jobs checker: every outbox row final (or allowed pending), rows complete, deadline kept."""

from __future__ import annotations

import pytest
from checker_builders import HistoryBuilder, attempt_row, good_exports, outbox_rows, outcome_rows

from chaos.checkers import CheckOptions
from chaos.checkers.jobs import check_jobs
from chaos.ledgers import Ledgers

BAD = ("stuck", "failed_without_review", "invalid_status", "missing_rows", "duplicated_rows", "orphan_rows", "deadline_exceeded")


def counts(rows: int = 3, done: int = 3, failed: int = 0, finished: int = 1, **problems: int) -> dict:
    base = {"rows": rows, "done": done, "failed": failed, "finished_attempts": finished}
    return {**base, **{k: 0 for k in BAD}, "pending_allowed": 0, "pending": 0, **problems}


def run(exports: dict, exported_at: float | None = None, history: HistoryBuilder | None = None, **options) -> dict:
    docs = dict(exports)
    if exported_at is not None:
        docs["outbox"] = {"table": "outbox", "exported_at": exported_at, "rows": exports["outbox"]}
    ops = history.ops if history is not None else []
    return check_jobs(ops, Ledgers.from_exports(**docs), CheckOptions.from_dict(options)).to_dict()


def summary(count: int, value: float | None) -> dict:
    return {"count": count, "p50": value, "p95": value, "p99": value, "max": value}


def test_all_done_is_valid_and_measures_completion_per_kind() -> None:
    result = run(good_exports("a1", "a2"))
    assert result == {
        "name": "jobs",
        "valid": True,
        "counts": counts(rows=6, done=6, finished=2),
        "violations": [],
        "examples": {},
        "notes": [],
        "details": {"completion_seconds": {"merit": summary(2, 0.5), "narrative": summary(2, 0.5), "sms": summary(2, 0.5)},
                    "enqueue_wait_seconds": {kind: summary(2, 0.1) for kind in ("merit", "narrative", "sms")},
                    "reenqueued_rows": 0},
    }


def test_rows_kept_pending_and_re_enqueued_are_measured_never_judged() -> None:
    """A row that waited 5 s for its first enqueue (Valkey full) and one sent twice are reported
    in the details; neither makes the run invalid while every row ends done."""
    exports = good_exports("a1", "a2")
    for row in exports["outbox"]:
        if row["operation_id"] == "merit-a2":
            row["enqueued_at"] = row["created_at"] + 5.0
        if row["operation_id"] == "sms-a1":
            row["attempts"], row["job_id"] = 2, "sms-a1-2"
    result = run(exports)
    assert result["valid"] is True
    assert result["details"]["enqueue_wait_seconds"]["merit"]["max"] == 5.0
    assert result["details"]["enqueue_wait_seconds"]["sms"]["count"] == 1  # the re-enqueued row's wait is not its first
    assert result["details"]["reenqueued_rows"] == 1


def test_job_still_enqueued_after_quiet_period_is_stuck() -> None:
    exports = good_exports("a1")
    exports["outbox"] = outbox_rows("a1", kinds=("merit", "sms")) + outbox_rows("a1", status="enqueued", kinds=("narrative",))
    result = run(exports, exported_at=160.0)
    assert result["valid"] is False
    assert result["counts"] == counts(done=2, stuck=1)
    assert result["examples"] == {
        "stuck": [
            {
                "operation_id": "narrative-a1",
                "status": "enqueued",
                "job_attempts": 1,
                "job_id": "narrative-a1-1",
                "last_error": None,
                "age_at_export": 60.0,
            }
        ]
    }


def test_allowed_pending_kind_is_accounted_for() -> None:
    exports = good_exports("a1")
    exports["outbox"] = outbox_rows("a1", kinds=("merit", "sms")) + outbox_rows("a1", status="pending", kinds=("narrative",))
    result = run(exports, allow_pending=["narrative"])
    assert result["valid"] is True
    assert result["counts"] == counts(done=2, pending_allowed=1)
    assert [e["operation_id"] for e in result["examples"]["pending_allowed"]] == ["narrative-a1"]


def test_failed_row_needs_a_failed_for_review_outcome() -> None:
    exports = good_exports("a1", "a2")
    exports["outbox"] = outbox_rows("a1", kinds=("merit", "narrative")) + outbox_rows("a1", status="failed", kinds=("sms",))
    exports["outbox"] += outbox_rows("a2", kinds=("merit", "narrative")) + outbox_rows("a2", status="failed", kinds=("sms",))
    exports["outcomes"] = outcome_rows("a1", kinds=("merit", "narrative")) + outcome_rows("a1", status="failed_for_review", kinds=("sms",))
    exports["outcomes"] += outcome_rows("a2", kinds=("merit", "narrative"))
    result = run(exports)
    assert result["valid"] is False
    assert result["counts"] == counts(rows=6, done=4, failed=2, finished=2, failed_without_review=1)
    assert [e["operation_id"] for e in result["examples"]["failed_without_review"]] == ["sms-a2"]


def test_finished_attempt_without_its_three_rows_is_invalid() -> None:
    exports = good_exports("a1")
    exports["outbox"] = outbox_rows("a1", kinds=("merit",))
    result = run(exports)
    assert result["valid"] is False
    assert result["counts"] == counts(rows=1, done=1, missing_rows=1)
    assert result["examples"] == {"missing_rows": [{"attempt_id": "a1", "missing_kinds": ["narrative", "sms"]}]}


def test_rows_for_unfinished_attempt_and_double_rows_are_invalid() -> None:
    exports = good_exports("a1")
    exports["attempts"].append(attempt_row("a2", status="open"))
    exports["outbox"] += outbox_rows("a2", kinds=("merit",)) + outbox_rows("a1", kinds=("sms",))
    result = run(exports)
    assert result["violations"] == ["duplicated_rows", "orphan_rows"]
    assert result["examples"] == {
        "duplicated_rows": [{"attempt_id": "a1", "kind": "sms", "rows": 2}],
        "orphan_rows": [{"attempt_id": "a2", "kinds": ["merit"]}],
    }


def test_unknown_status_is_invalid() -> None:
    exports = good_exports("a1")
    exports["outbox"] = outbox_rows("a1", kinds=("merit", "narrative")) + outbox_rows("a1", status="lost", kinds=("sms",))
    result = run(exports)
    assert result["violations"] == ["invalid_status"]


def test_outcome_later_than_deadline_is_invalid() -> None:
    exports = good_exports("a0", "a1")
    # merit-a0 is not final yet (allowed): the deadline scan must go on past it to narrative-a1.
    exports["outbox"] = (outbox_rows("a0", status="pending", kinds=("merit",)) + outbox_rows("a0", kinds=("narrative", "sms"))
                         + outbox_rows("a1", kinds=("merit", "sms")) + outbox_rows("a1", kinds=("narrative",), took=12.0))
    result = run(exports, outcome_deadline_seconds=10, allow_pending=["merit"])
    assert result["valid"] is False
    assert result["counts"] == counts(rows=6, done=5, finished=2, deadline_exceeded=1, pending_allowed=1)
    assert result["examples"]["deadline_exceeded"] == [{"operation_id": "narrative-a1", "status": "done", "seconds": 12.0, "deadline": 10.0}]
    assert result["details"]["outcome_deadline_seconds"] == 10.0
    assert result["details"]["completion_seconds"]["narrative"] == {"count": 2, "p50": 0.5, "p95": 12.0, "p99": 12.0, "max": 12.0}


def test_failed_for_review_counts_as_final_at_its_outcome_time() -> None:
    exports = good_exports("a1")
    exports["outbox"] = outbox_rows("a1", kinds=("merit", "narrative")) + outbox_rows("a1", status="failed", kinds=("sms",))
    exports["outcomes"] = outcome_rows("a1", kinds=("merit", "narrative")) + outcome_rows("a1", "failed_for_review", ("sms",), at=109.0)
    assert run(exports, outcome_deadline_seconds=10)["valid"] is True
    late = run(exports, outcome_deadline_seconds=5)
    assert late["examples"] == {"deadline_exceeded": [{"operation_id": "sms-a1", "status": "failed", "seconds": 9.0, "deadline": 5.0}]}


def test_unread_outbox_is_unknown() -> None:
    exports = good_exports("a1")
    del exports["outbox"]
    result = check_jobs([], Ledgers.from_exports(**exports), CheckOptions()).to_dict()
    assert result["valid"] == "unknown"
    assert result["notes"] == ["ledger outbox was not read: not exported", "cannot tell finished work from vanished work"]


def test_acknowledged_finish_whose_attempt_row_and_rows_vanished_is_missing_rows() -> None:
    h = HistoryBuilder()
    h.call(1, "session", {"student_id": "s1"}, status=201)
    h.call(1, "finish", {"attempt_id": "a1"}, status=202)
    h.call(2, "finish", {"attempt_id": "a2"}, status=202)  # acknowledged; the ledger has no trace of a2
    result = run(good_exports("a1"), history=h, outcome_deadline_seconds=10)  # no crash on an attempt without rows
    assert result["violations"] == ["missing_rows"]
    assert result["examples"]["missing_rows"] == [{"attempt_id": "a2", "missing_kinds": ["merit", "narrative", "sms"]}]
    assert result["counts"]["finished_attempts"] == 2


def test_malformed_finish_is_unknown_and_later_finishes_are_still_judged() -> None:
    h = HistoryBuilder()
    h.call(1, "finish", {"attempt_id": "a1"}, status=202)
    h.call(1, "finish", {}, status=202)
    assert run(good_exports("a1"), history=h)["valid"] == "unknown"
    h.call(1, "finish", {"attempt_id": "a2"}, status=202)
    assert run(good_exports("a1"), history=h)["violations"] == ["missing_rows"]


def test_an_outcome_exactly_at_the_deadline_is_in_time() -> None:
    exports = good_exports("a1")
    exports["outbox"] = outbox_rows("a1", kinds=("merit", "sms")) + outbox_rows("a1", kinds=("narrative",), took=11.0)
    assert run(exports, outcome_deadline_seconds=11)["valid"] is True  # finished_at 100, done 111: exactly 11 s
    assert run(exports, outcome_deadline_seconds=10.5)["violations"] == ["deadline_exceeded"]
    exports["attempts"] = [attempt_row("a1", finished_at=95.0)]  # measured from the finish, not the row's creation
    assert run(exports, outcome_deadline_seconds=11)["violations"] == ["deadline_exceeded"]


# ---------------------------------------------------------------- pending: the final read's queue evidence
def queue_row(op: str, state: str, status: str = "enqueued") -> dict:
    kind = op.split("-", 1)[0]
    return {"operation_id": op, "kind": kind, "lane": {"narrative": "ai"}.get(kind, kind), "status": status,
            "job_id": f"{op}-1", "state": state}


def open_narratives(*states: str, read_at: float = 160.0) -> dict:
    """Attempts a1 (all done: the valid prefix) and a2..: each one's narrative still open, its job in ``state``."""
    exports = good_exports("a1", *(f"a{n + 2}" for n in range(len(states))))
    open_ops = [f"narrative-a{n + 2}" for n in range(len(states))]
    exports["outbox"] = [r for r in exports["outbox"] if r["operation_id"] not in open_ops]
    exports["outbox"] += [r for n in range(len(states)) for r in outbox_rows(f"a{n + 2}", status="enqueued",
                                                                            kinds=("narrative",))]
    exports["queues"] = {"table": "queues", "exported_at": read_at,
                         "rows": [queue_row(op, state) for op, state in zip(open_ops, states) if state != "final"]}
    return exports


@pytest.mark.parametrize("state", ["queued", "dequeued", "running", "waiting", "awaiting_relay", "final"])
def test_an_open_job_the_queues_show_in_progress_is_pending_and_unknown_never_valid(state: str) -> None:
    result = run(open_narratives(state), exported_at=160.0)
    assert result["valid"] == "unknown"
    assert result["counts"]["pending"] == 1 and result["counts"]["stuck"] == 0
    [example] = result["examples"]["pending"]
    assert example["operation_id"] == "narrative-a2"
    assert example["evidence"] == ("final after the outbox read" if state == "final" else state)
    assert any("still in progress at the final read" in note for note in result["notes"])


@pytest.mark.parametrize("state", ["abandoned", "absent", "unrelayed", "failed", "finished", "stopped"])
def test_an_open_job_in_neither_place_is_stuck(state: str) -> None:
    result = run(open_narratives("queued", state), exported_at=160.0)  # the pending one first: invalid still wins
    assert result["valid"] is False
    assert result["counts"]["stuck"] == 1 and result["counts"]["pending"] == 1
    assert result["examples"]["stuck"][0]["queue_state"] == state


def test_without_the_queue_read_every_open_row_is_stuck_as_before() -> None:
    exports = open_narratives("queued")
    del exports["queues"]
    result = run(exports, exported_at=160.0)
    assert result["valid"] is False and result["counts"]["stuck"] == 1 and result["counts"]["pending"] == 0
    assert "queue_state" not in result["examples"]["stuck"][0]


def test_a_job_in_progress_past_its_deadline_is_stuck() -> None:
    # finished at 100 (created_at), read at 160: inside a 60 s deadline, outside a 59 s one
    assert run(open_narratives("running"), outcome_deadline_seconds=60)["valid"] == "unknown"
    late = run(open_narratives("running"), outcome_deadline_seconds=59)
    assert late["valid"] is False and late["counts"]["stuck"] == 1


def test_a_kind_allowed_to_stay_pending_needs_no_evidence() -> None:
    result = run(open_narratives("absent"), allow_pending=["narrative"])
    assert result["valid"] is True and result["counts"]["pending_allowed"] == 1 and result["counts"]["pending"] == 0
