"""Answers as revisions under reordering (#14): the highest acknowledged revision is the
frozen answer; the "last arrival wins" control makes a lost update, named; the
compacting control loses acknowledged revisions from the log."""

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


def _figures(run) -> str:  # ChaosRun
    final = run.checker("final_answers")["counts"]
    revisions = run.checker("revisions")
    visibility = revisions.get("details", {}).get("read_visibility", {})
    return (f"revisions written {final['revisions_written']}, reordered {final['reordered']}, superseded "
            f"{revisions['counts']['superseded_acknowledged']}, read visibility p50 {visibility.get('p50')} s "
            f"p99 {visibility.get('p99')} s")


def test_answer_revisions_keep_the_highest_acknowledged(run_chaos):
    run = run_chaos("answer_revisions")
    assert any(f["kind"] == "toxic" for f in run.faults()), "no jitter on the web links"
    print(_figures(run))
    assert run.valid is True, run.summary()
    stats = run.checker("stats")["counts"]
    assert stats["info"] > 0, f"cutting web_2's replies made no outcome unknown: {stats}"
    assert stats["duplicate_sends"] > 0, f"the workload's deliberate resends were not told apart from retries: {stats}"
    final = run.checker("final_answers")["counts"]
    assert final["reordered"] > 0 and final["lost_update"] == 0, final
    revisions = run.checker("revisions")["counts"]
    assert revisions["superseded_acknowledged"] > 0 and revisions["lost"] == 0, revisions
    assert run.checker("answer_reads")["counts"]["reads"] > 0
    assert run.recheck() == 0


@pytest.mark.negative_control
def test_last_arrival_wins_is_a_lost_update_and_named(run_chaos):
    run = run_chaos("answer_revisions_last_arrival")
    assert run.valid is False, run.summary()
    final = run.checker("final_answers")
    assert final["valid"] is False and final["counts"]["lost_update"] > 0, run.summary()
    example = final["examples"]["lost_update"][0]
    assert example["final_revision"] < example["acknowledged_revision"]
    assert example["final_receipt_id"] and example["acknowledged_receipt_id"] and example["question"]
    assert run.recheck() == 1


@pytest.mark.negative_control
def test_a_compacting_log_loses_acknowledged_revisions(run_chaos):
    run = run_chaos("answer_revisions_compacting")
    assert run.valid is False, run.summary()
    revisions = run.checker("revisions")
    assert revisions["valid"] is False and revisions["counts"]["lost"] > 0, run.summary()
    assert run.recheck() == 1
