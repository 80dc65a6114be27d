"""A web node SIGKILLed mid-load: acknowledged answers are all kept, none duplicated,
and the report counts the client retries that the kill caused."""

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


def test_web_node_kill_keeps_acknowledged_answers(run_chaos):
    run = run_chaos("web_node_kill")
    assert any(f["kind"] == "kill" for f in run.faults()), "no web node was killed"
    assert run.valid is True, run.summary()
    answers = run.checker("answers")["counts"]
    assert answers["acknowledged"] > 0
    assert answers["lost"] == 0 and answers["duplicated"] == 0, answers
    assert "retries" in run.checker("stats")["counts"]
