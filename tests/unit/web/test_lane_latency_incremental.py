"""The incremental lane-latency histogram (stack/web/lane_latency.py): after several scrapes with
rows arriving in between it equals a full scan; the rows it re-reads inside the overlap are never
counted twice; a scrape reads only the rows done since the previous one (plus the overlap)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import Engine, update

from stack.ledger import outbox
from stack.ledger.schema import outbox as outbox_table
from stack.web.lane_latency import LaneLatency
from stack.web.metrics import LANE_LATENCY_BOUNDS

from bench_metrics_scrape import seed_done_rows

EXAM = "NOVA-101"


def _update(tracker: LaneLatency, ledger: Engine) -> dict:
    with ledger.connect() as conn:
        return tracker.update(conn)


def _full_scan(ledger: Engine) -> dict:
    with ledger.connect() as conn:
        return outbox.latency_histogram(conn, LANE_LATENCY_BOUNDS)


def _assert_equal(incremental: dict, full: dict) -> None:
    assert {k: v[:2] for k, v in incremental.items()} == {k: v[:2] for k, v in full.items()}
    for kind, (_, _, total) in full.items():
        assert incremental[kind][2] == pytest.approx(total)


def test_scrapes_with_rows_arriving_between_equal_a_full_scan(ledger: Engine) -> None:
    tracker, now = LaneLatency(LANE_LATENCY_BOUNDS, overlap=5.0), time.time()
    seed_done_rows(ledger, EXAM, [now - 3600 + i for i in range(30)], prefix="a")
    _assert_equal(_update(tracker, ledger), _full_scan(ledger))
    for batch in range(4):
        seed_done_rows(ledger, EXAM, [now + batch * 10 + i * 0.5 for i in range(12)], prefix=f"b{batch}")
        _assert_equal(_update(tracker, ledger), _full_scan(ledger))
        # committed after that scrape, 2 s below its high-water mark (PostgreSQL commit order): the next finds it
        seed_done_rows(ledger, EXAM, [now + batch * 10 + 5.5 - 2.0], prefix=f"late{batch}")
    _assert_equal(_update(tracker, ledger), _full_scan(ledger))
    assert sum(count for _, count, _ in _full_scan(ledger).values()) == 30 + 4 * 13


def test_rows_reread_inside_the_overlap_are_not_counted_twice(ledger: Engine) -> None:
    tracker, now = LaneLatency(LANE_LATENCY_BOUNDS, overlap=60.0), time.time()
    seed_done_rows(ledger, EXAM, [now - i for i in range(20)], prefix="a")  # all within the overlap
    first = _update(tracker, ledger)
    read_before = tracker.rows_read
    for _ in range(3):
        assert _update(tracker, ledger) == first  # nothing new: nothing added
    assert tracker.rows_read - read_before == 3 * 20  # each scrape did re-read all 20: the dedupe held
    _assert_equal(first, _full_scan(ledger))


def test_a_scrape_reads_only_rows_done_since_the_previous_one(ledger: Engine) -> None:
    tracker, now = LaneLatency(LANE_LATENCY_BOUNDS, overlap=1.0), time.time()
    seed_done_rows(ledger, EXAM, [now - 7200 + i for i in range(500)], prefix="old")
    _update(tracker, ledger)
    assert tracker.rows_read == 500  # the node's first scrape: one full read
    seed_done_rows(ledger, EXAM, [now + i * 2.0 for i in range(5)], prefix="new")  # 2 s apart: one in the overlap
    _update(tracker, ledger)
    assert tracker.rows_read == 500 + 2 + 5  # the 5 new rows and the 2 old ones in the 1 s overlap, not 1005
    _assert_equal(_update(tracker, ledger), _full_scan(ledger))
    assert tracker.rows_read == 507 + 1  # the last row, inside the 1 s overlap, re-read and skipped


def test_a_row_marked_done_after_a_scrape_lands_once_and_counts_never_fall(ledger: Engine, app_client) -> None:
    from web_support import answer, start, token_for

    token = token_for(app_client, "s-3")
    attempt = start(app_client, token)
    answer(app_client, token, attempt, "q1", "B", key="k1")
    app_client.post(f"/v1/attempts/{attempt}/finish", headers={"Authorization": f"Bearer {token}"})
    tracker = LaneLatency(LANE_LATENCY_BOUNDS)
    assert _update(tracker, ledger) == {}  # three rows, none done
    with ledger.begin() as conn:
        outbox.mark_done(conn, f"merit-{attempt}")  # the real transition, its own clock
    after = _update(tracker, ledger)
    assert after["merit"][1] == 1 and _update(tracker, ledger) == after
    _assert_equal(after, _full_scan(ledger))


def test_bad_bounds_and_overlap_are_named() -> None:
    with pytest.raises(ValueError, match="bounds must be strictly increasing"):
        LaneLatency((1.0, 0.5))
    with pytest.raises(ValueError, match="overlap must be >= 0"):
        LaneLatency(LANE_LATENCY_BOUNDS, overlap=-1)


def test_metrics_endpoint_counts_rows_done_between_two_scrapes(app_client, admin_client, ledger: Engine) -> None:
    from web_support import ADMIN

    now = time.time()
    seed_done_rows(ledger, EXAM, [now - 100 + i for i in range(6)], prefix="a", latency=lambda i: 0.3)
    first = admin_client.get("/metrics", headers={"X-Admin-Token": ADMIN}).text
    seed_done_rows(ledger, EXAM, [now + i for i in range(3)], prefix="b", latency=lambda i: 0.3)
    with ledger.begin() as conn:  # a row of the first batch cannot move again: done is terminal
        assert conn.execute(update(outbox_table).where(outbox_table.c.operation_id == "merit-a-a0",
                                                       outbox_table.c.status != "done").values(done_at=0)).rowcount == 0
    second = admin_client.get("/metrics", headers={"X-Admin-Token": ADMIN}).text
    merit = 'proctor_lane_latency_seconds_bucket{kind="merit",lane="merit",le="0.5"}'
    assert f"{merit} 2.0" in first and f"{merit} 3.0" in second  # kinds cycle merit, narrative, sms


def test_a_ledger_made_before_the_index_gets_it_at_init(ledger: Engine, settings) -> None:
    from sqlalchemy import inspect, text

    from stack.ledger.engine import init_ledger

    def indexes() -> set[str]:
        return {ix["name"] for ix in inspect(ledger).get_indexes("outbox")}

    assert "ix_outbox_done_at" in indexes()
    with ledger.begin() as conn:
        conn.execute(text("DROP INDEX ix_outbox_done_at"))
    init_ledger(ledger, settings)  # create_all alone would skip it: the table exists
    init_ledger(ledger, settings)  # and again, as every process does at start
    assert "ix_outbox_done_at" in indexes()


def test_the_scrapes_query_is_an_index_range_not_a_scan_of_every_done_row(ledger: Engine) -> None:
    from sqlalchemy import text

    query = outbox.done_since_query(1234.5).compile(ledger, compile_kwargs={"literal_binds": True})
    with ledger.connect() as conn:
        plan = " ".join(row[-1] for row in conn.execute(text(f"EXPLAIN QUERY PLAN {query}")))
    assert "ix_outbox_done_at (status=? AND done_at>?)" in plan, plan  # ix_outbox_status alone reads every done row
