"""stats checker: no vacuous pass; outcome counts, retries, faults."""

from __future__ import annotations

from checker_builders import HistoryBuilder, answer

from chaos.checkers import CheckOptions
from chaos.checkers.stats import check_stats
from chaos.history import DELIBERATE_DUPLICATE
from chaos.ledgers import Ledgers


def run(h: HistoryBuilder, **options) -> dict:
    return check_stats(h.ops, Ledgers(), CheckOptions.from_dict(options)).to_dict()


def test_a_run_that_did_things_is_valid_with_counts_and_retries() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B", key="k1"), outcome="info")
    h.call(2, "answer", answer("a1", "q1", "B", key="k1"))
    h.call(2, "answer", answer("a1", "q2", "C", key="k2"), outcome="fail")
    h.call(2, "finish", {"attempt_id": "a1", "idempotency_key": "f1"})
    h.call(3, "merit_card", {"attempt_id": "a1"}, outcome=None)
    h.fault(1, "kill", "worker_merit_1", start=0.5, end=1.5)
    result = run(h)
    assert result == {
        "name": "stats",
        "valid": True,
        "counts": {
            "ops": 5,
            "ok": 2,
            "fail": 1,
            "info": 2,
            "idempotency_keys": 3,
            "retried_keys": 1,
            "retries": 1,
            "duplicate_sends": 0,
            "faults": 1,
            "faults_unhealed": 0,
            "vacuous_ops": 0,
            "no_client_ops": 0,
        },
        "violations": [],
        "examples": {"retried_keys": [{"idempotency_key": "k1", "invokes": 2, "duplicate_sends": 0}]},
        "notes": [],
        "details": {
            "by_f": {
                "answer": {"ok": 1, "fail": 1, "info": 1},
                "finish": {"ok": 1, "fail": 0, "info": 0},
                "merit_card": {"ok": 0, "fail": 0, "info": 1},
            },
            "expect_ops": ["answer", "finish"],
        },
    }


def answered_and_finished() -> HistoryBuilder:
    """A valid start: one answer, the finish, one revision; no key sent twice."""
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B", key="k1"))
    h.call(1, "finish", {"attempt_id": "a1", "idempotency_key": "f1"})
    h.call(2, "revise", answer("a1", "q2", "C", key="k2"))
    return h


def test_deliberate_duplicate_sends_are_counted_apart_from_retries() -> None:
    h = answered_and_finished()
    h.call(3, "revise", {**answer("a1", "q2", "C", key="k2"), DELIBERATE_DUPLICATE: 1})  # the workload's replay
    # after the valid ops: a key both retried and resent, and the resend itself retried
    h.call(4, "revise", answer("a1", "q3", "D", key="k3"), outcome="info")
    h.call(5, "revise", answer("a1", "q3", "D", key="k3"))
    h.call(6, "revise", {**answer("a1", "q3", "D", key="k3"), DELIBERATE_DUPLICATE: 1}, outcome="info")
    h.call(7, "revise", {**answer("a1", "q3", "D", key="k3"), DELIBERATE_DUPLICATE: 1})
    result = run(h)
    assert result["valid"] is True
    counts = {name: result["counts"][name] for name in ("idempotency_keys", "retried_keys", "retries", "duplicate_sends")}
    assert counts == {"idempotency_keys": 4, "retried_keys": 1, "retries": 2, "duplicate_sends": 2}
    assert result["examples"]["retried_keys"] == [{"idempotency_key": "k3", "invokes": 4, "duplicate_sends": 1}]


def test_an_unmarked_second_send_is_a_retry_negative_control() -> None:
    h = answered_and_finished()
    h.call(3, "revise", answer("a1", "q2", "C", key="k2"))  # the same resend without the mark
    counts = run(h)["counts"]
    assert (counts["retried_keys"], counts["retries"], counts["duplicate_sends"]) == (1, 1, 0)


def test_expected_f_without_any_ok_is_vacuous() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"), outcome="fail")
    h.call(1, "answer", answer("a1", "q2", "B"), outcome="info")
    result = run(h)
    assert result["valid"] is False
    assert result["violations"] == ["vacuous_ops"]
    assert result["examples"] == {
        "vacuous_ops": [{"f": "answer", "ok": 0, "fail": 1, "info": 1}, {"f": "finish", "ok": 0, "fail": 0, "info": 0}]
    }


def test_empty_history_is_invalid() -> None:
    result = run(HistoryBuilder(), expect_ops=[])
    assert result["valid"] is False
    assert result["violations"] == ["no_client_ops"]


def test_expect_ops_is_configurable() -> None:
    h = HistoryBuilder()
    h.call(1, "session", {"student_id": "s1"})
    assert run(h, expect_ops=["session"])["valid"] is True
    assert run(h)["valid"] is False


def test_unhealed_fault_is_noted() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"))
    h.call(1, "finish", {"attempt_id": "a1"})
    h.fault(7, "pause", "web_2", start=0.2, end=None)
    result = run(h)
    assert result["valid"] is True
    assert result["counts"]["faults_unhealed"] == 1
    assert result["notes"] == ["fault 7 (pause web_2) has no fault-end: never healed"]
