"""latency checker: quantiles per f and per lane, SLO comparison, unknown without data."""

from __future__ import annotations

import pytest
from checker_builders import HistoryBuilder, answer, attempt_row, good_exports, ledgers_from, outbox_rows

from chaos.checkers import CheckOptions
from chaos.checkers.base import OptionsError
from chaos.observe.pace import REFERENCE_SECONDS
from chaos.checkers.latency import check_latency, render_details, resolve_slo_key


def history(latencies: list[float]) -> HistoryBuilder:
    h = HistoryBuilder()
    h.call(300, "merit_card", {"attempt_id": "a0"}, outcome=None)  # never completed, before the rest: the scan goes on
    for n, latency in enumerate(latencies):
        h.call(n, "answer", answer("a1", f"q{n}", "B"), latency=latency)
    return h


def run(h: HistoryBuilder, exports: dict | None = None, **options) -> dict:
    ledgers = ledgers_from(exports if exports is not None else good_exports("a1"))
    return check_latency(h.ops, ledgers, CheckOptions.from_dict(options)).to_dict()


def test_quantiles_per_f_by_nearest_rank() -> None:
    h = history([i / 100 for i in range(1, 101)])  # 0.01 .. 1.00
    h.call(200, "finish", {"attempt_id": "a1"}, outcome=None)
    result = run(h)
    assert result["valid"] is True
    assert result["details"]["ops"] == {"answer": {"count": 100, "p50": 0.5, "p95": 0.95, "p99": 0.99, "max": 1.0}}
    assert result["details"]["incomplete"] == {"finish": 1, "merit_card": 1}


def test_lanes_from_outbox_and_oldest_age_from_samples() -> None:
    h = history([0.1])
    h.sample(1.0, merit=(3, 0.2), ai=(40, 5.0))
    h.sample(2.0, merit=(0, 0.0), ai=(10, 7.5))
    exports = good_exports("a1")
    exports["outbox"] = outbox_rows("a0", status="pending", kinds=("merit",)) + exports["outbox"]  # not done: skipped, not the end
    exports["attempts"].append(attempt_row("a0", status="open"))
    result = run(h, exports)
    lanes = result["details"]["lanes"]
    assert lanes["merit"] == {"count": 1, "p50": 0.5, "p95": 0.5, "p99": 0.5, "max": 0.5, "wait": {"count": 1, "p50": 0.4, "p95": 0.4, "p99": 0.4, "max": 0.4}, "oldest_age": 0.2}
    assert lanes["ai"]["oldest_age"] == 7.5
    assert lanes["sms"]["oldest_age"] is None


def test_op_slo_violated_is_invalid() -> None:
    result = run(history([0.1] * 98 + [0.9, 2.0]), slo={"answer": {"p99": 0.5, "p50": 0.2}})
    assert result["valid"] is False
    assert result["counts"] == {"slos": 1, "slo_violations": 1}
    assert result["violations"] == ["slo_violations"]
    assert result["examples"] == {"slo_violations": [{"slo": "answer", "threshold": "p99", "limit": 0.5, "stated": 0.5, "pace_factor": 1.0, "observed": 0.9}]}


def test_lane_slo_on_completion_and_oldest_age() -> None:
    h = history([0.1])
    h.sample(1.0, merit=(5, 3.0))
    exports = good_exports("a1")
    exports["outbox"] = outbox_rows("a1", kinds=("narrative", "sms")) + outbox_rows("a1", kinds=("merit",), took=70.0)
    result = run(h, exports, slo={"merit": {"p99": 60, "oldest_age": 2}})
    assert result["valid"] is False
    assert result["examples"]["slo_violations"] == [
        {"slo": "merit", "threshold": "oldest_age", "limit": 2.0, "observed": 3.0},
        {"slo": "merit", "threshold": "p99", "limit": 60.0, "observed": 70.0},
    ]


SLOW = [0.1] * 98 + [0.9, 2.0]  # the slow answers come after the fast ones
REFERENCE = REFERENCE_SECONDS


def paced(latencies: list[float], probes: list[float]) -> HistoryBuilder:
    h = history(latencies)
    for n, pace in enumerate(probes):
        h.sample(0.5 * n, pace=pace, merit=(0, 0.0))
    return h


def test_a_slower_machine_gets_a_proportionally_longer_client_slo() -> None:
    # the machine ran 2x slower than the reference (median of the probes; one preempted probe does not count)
    result = run(paced(SLOW, [2 * REFERENCE, 2 * REFERENCE, 50 * REFERENCE]), slo={"answer": {"p99": 0.5}})
    assert result["valid"] is True, result
    assert result["details"]["pace"] == {"probes": 3, "median_seconds": 2 * REFERENCE, "reference_seconds": REFERENCE,
                                         "factor": 2.0}


def test_at_the_reference_pace_the_stack_that_got_slow_on_its_own_still_fails() -> None:
    result = run(paced(SLOW, [REFERENCE, 0.5 * REFERENCE, REFERENCE]), slo={"answer": {"p99": 0.5}})
    assert result["valid"] is False  # a faster machine never tightens the SLO below what was stated, nor loosens it
    assert result["examples"]["slo_violations"] == [
        {"slo": "answer", "threshold": "p99", "limit": 0.5, "stated": 0.5, "pace_factor": 1.0, "observed": 0.9}]


def test_the_pace_factor_scales_client_slos_only_never_lane_thresholds() -> None:
    h = paced([0.1], [4 * REFERENCE] * 3)
    h.sample(2.0, pace=4 * REFERENCE, merit=(5, 3.0))
    result = run(h, slo={"merit": {"oldest_age": 2}, "answer": {"p99": 0.05}})
    assert result["examples"]["slo_violations"] == [
        {"slo": "merit", "threshold": "oldest_age", "limit": 2.0, "observed": 3.0}]
    assert any("client SLOs applied x4" in line for line in render_details(result["details"]))


def test_slo_met_is_valid() -> None:
    result = run(history([0.1, 0.2]), slo={"op:answer": {"max": 0.5}, "lane:ai": {"p95": 1}})
    assert result["valid"] is True
    assert result["counts"] == {"slos": 2, "slo_violations": 0}


def test_slo_without_data_is_unknown() -> None:
    result = run(history([0.1]), slo={"finish": {"p99": 1}})
    assert result["valid"] == "unknown"
    assert result["notes"] == ["slo finish.p99: no data to compare with 1.0 s"]


def test_lane_slo_without_outbox_is_unknown() -> None:
    exports = good_exports("a1")
    del exports["outbox"]
    result = run(history([0.1]), exports, slo={"merit": {"p99": 1}})
    assert result["valid"] == "unknown"
    assert result["notes"] == ["ledger outbox was not read: not exported", "slo merit.p99: no data to compare with 1.0 s"]


def test_slo_key_resolution() -> None:
    assert resolve_slo_key("merit") == ("lane", "merit")
    assert resolve_slo_key("narrative") == ("op", "narrative")  # the GET; its lane is "ai"
    assert resolve_slo_key("lane:ai") == ("lane", "ai")
    assert resolve_slo_key("op:answer") == ("op", "answer")


@pytest.mark.parametrize("slo", [{"answer": {"p42": 1}}, {"answer": {"p99": -1}}, {"answer": {}}, {"answer": 3}])
def test_bad_slo_options_are_rejected(slo: dict) -> None:
    with pytest.raises(OptionsError, match="options.slo"):
        CheckOptions.from_dict({"slo": slo})


def test_oldest_age_on_an_op_is_unknown_but_the_op_thresholds_after_it_are_still_compared() -> None:
    result = run(history([0.1] * 98 + [0.9, 2.0]), slo={"answer": {"oldest_age": 1.0, "p99": 0.5}})
    assert result["valid"] is False
    assert result["examples"]["slo_violations"] == [{"slo": "answer", "threshold": "p99", "limit": 0.5, "stated": 0.5, "pace_factor": 1.0, "observed": 0.9}]
    assert result["notes"] == ["slo answer: oldest_age applies to lanes only"]


def test_a_value_exactly_at_the_limit_keeps_the_slo() -> None:
    """An SLO is exceeded only above its limit: p99 == limit is kept (kills a `>` -> `>=` mutant)."""
    assert run(history([0.1] * 99 + [0.5]), slo={"answer": {"p99": 0.1}})["valid"] is True
    assert run(history([0.1] * 98 + [0.2, 0.5]), slo={"answer": {"p99": 0.1}})["valid"] is False  # the control


def test_a_completion_without_latency_is_timed_from_its_invoke() -> None:
    h = history([0.1])
    invoked = h.op(7, "invoke", "finish", {"attempt_id": "a1"})
    h.op(7, "ok", "finish", {"attempt_id": "a1"}, at=invoked.time + 0.25)  # no latency field: older writers
    assert run(h)["details"]["ops"]["finish"]["max"] == pytest.approx(0.25)


def test_a_done_row_without_done_at_is_left_out_of_the_lane_figures() -> None:
    exports = good_exports("a1")
    broken = outbox_rows("a0", kinds=("merit",))
    broken[0]["done_at"] = None
    exports["outbox"] = broken + exports["outbox"]  # before the good rows: the scan must go on
    exports["attempts"].append(attempt_row("a0"))
    assert run(history([0.1]), exports)["details"]["lanes"]["merit"]["count"] == 1


def test_a_bare_prefix_is_an_op_name_not_an_empty_lane() -> None:
    assert resolve_slo_key("lane") == ("op", "lane")
    assert resolve_slo_key("lane:merit") == ("lane", "merit") and resolve_slo_key("op:merit") == ("op", "merit")
