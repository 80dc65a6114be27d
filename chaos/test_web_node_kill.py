"""A web node frozen then SIGKILLed mid-load: acknowledged answers are all kept, none
duplicated, and the report counts the client retries that the kill caused.

Negative control: web nodes that acknowledge an answer before committing it
(write-behind, 1 s) lose acknowledged answers — those buffered in a killed node, and
those whose late commit finds the attempt already finished — and the answers checker
must report them lost.
"""

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


def test_web_node_kill_keeps_acknowledged_answers(run_chaos):
    run = run_chaos("web_node_kill")
    assert any(f["kind"] == "kill" and f.get("freeze_first") for f in run.faults()), "no web node was killed"
    stats = run.checker("stats")["counts"]
    assert stats["info"] > 0 and stats["retries"] > 0, f"the kills hit no request in flight: {stats}"
    assert run.valid is True, run.summary()
    answers = run.checker("answers")["counts"]
    assert answers["acknowledged"] > 0
    assert answers["lost"] == 0 and answers["duplicated"] == 0, answers
    assert run.recheck() == 0


@pytest.mark.negative_control
def test_write_behind_acknowledgement_loses_answers_and_is_reported(run_chaos):
    run = run_chaos("web_node_kill_write_behind")
    assert any(f["kind"] == "kill" for f in run.faults()), "no web node was killed"
    assert run.valid is False, run.summary()
    answers = run.checker("answers")
    assert answers["valid"] is False and answers["counts"]["lost"] > 0, run.summary()
    assert run.recheck() == 1
