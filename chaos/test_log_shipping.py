"""Log shipping through a log store outage (issue #26, docs/log-shipping.md): rsyslog follows
every component's log, buffers up to its bound while the store is down, drops and counts past
it, and RELP re-sends what was unacknowledged. Two negative controls: no redaction (the canary
check must find the canaries) and no drop counters (the loss must be reported)."""

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


def test_every_line_is_shipped_or_counted_dropped_and_no_canary_reaches_the_store(run_chaos):
    run = run_chaos("log_store_outage")
    assert run.valid is True, run.summary()
    counts = run.checker("logship")["counts"]
    assert counts["dropped"] >= 1, counts  # the outage reached the buffer's bound: drops happened, and were counted
    # lines the shipper's counters still hold at the final read are delayed, not lost (rsyslog #2646)
    assert counts["produced"] <= counts["shipped"] + counts["dropped"] + counts["buffered"], counts
    assert counts["redacted"] >= 2, counts  # the canary lines arrived, redacted: the canary check was exercised
    assert counts["canary_leaked"] == 0
    assert run.recheck() == 0


@pytest.mark.negative_control
def test_without_redaction_the_canaries_reach_the_store_and_are_caught(run_chaos):
    run = run_chaos("log_store_outage_unredacted")
    assert run.valid is False, run.summary()
    leaked = run.checker("logship")["examples"]["canary_leaked"]
    assert {row["canary"] for row in leaked} == {"CANARY-ANSWER-d41d8cd98f", "CANARY-CODE-0cc175b9c0"}, leaked


@pytest.mark.negative_control
def test_drops_nobody_counted_are_reported_as_lines_neither_shipped_nor_counted(run_chaos):
    run = run_chaos("log_store_outage_uncounted")
    assert run.valid is False, run.summary()
    result = run.checker("logship")
    assert result["counts"]["uncounted_loss"] == 1 and result["counts"]["dropped"] == 0, result["counts"]
    assert result["counts"]["canary_leaked"] == 0  # redaction is on: only the counting is missing
