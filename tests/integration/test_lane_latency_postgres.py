"""The incremental lane-latency histogram on PostgreSQL, where transactions commit out of
``done_at`` order: a row marked done first but committed after a scrape saw a later row is
still counted once (the 60 s overlap), and init_ledger adds the index to an existing ledger."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from stack.embedded.postgres import PostgresServer
from sqlalchemy import Engine, inspect, text

from stack.config import Settings
from stack.ledger import outbox
from stack.ledger.engine import init_ledger, make_engine
from stack.web.lane_latency import LaneLatency
from stack.web.metrics import LANE_LATENCY_BOUNDS

from bench_metrics_scrape import seed_done_rows

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pg_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Settings]]:
    with PostgresServer() as server:
        settings = Settings(run_dir=tmp_path_factory.mktemp("pg"), database_url=server.url, exams={"NOVA-101": 1})
        engine = make_engine(settings)
        init_ledger(engine, settings)
        yield engine, settings
        engine.dispose()


def _update(tracker: LaneLatency, engine: Engine) -> dict:
    with engine.connect() as conn:
        return tracker.update(conn)


def _counts(histograms: dict) -> dict:
    return {kind: value[:2] for kind, value in histograms.items()}


def test_a_row_committed_after_a_later_one_was_scraped_is_counted_once(pg_ledger: tuple[Engine, Settings]) -> None:
    engine, _ = pg_ledger
    ops = seed_done_rows(engine, "NOVA-101", [time.time() - 100.0] * 2, prefix="race")
    with engine.begin() as conn:  # back to pending, so that both can be marked done for real
        conn.execute(text("UPDATE outbox SET status = 'pending', done_at = NULL WHERE operation_id IN (:a, :b)"),
                     {"a": ops[0], "b": ops[1]})
    tracker = LaneLatency(LANE_LATENCY_BOUNDS)
    _update(tracker, engine)
    assert tracker.overlap == 60.0  # PostgreSQL's
    with engine.connect() as slow:
        slow.begin()
        outbox.mark_done(slow, ops[0])  # its done_at is read now, its commit comes later
        with engine.begin() as fast:
            outbox.mark_done(fast, ops[1])  # a later done_at, committed first
        seen_later_only = _update(tracker, engine)
        slow.commit()
    after = _update(tracker, engine)
    with engine.connect() as conn:
        full = outbox.latency_histogram(conn, LANE_LATENCY_BOUNDS)
    assert sum(count for _, count, _ in seen_later_only.values()) == 1
    assert _counts(after) == _counts(full) and sum(count for _, count, _ in after.values()) == 2
    assert _counts(_update(tracker, engine)) == _counts(full)  # re-read inside the overlap, not re-counted


def test_init_ledger_adds_the_index_to_a_postgres_ledger_made_before_it(pg_ledger: tuple[Engine, Settings]) -> None:
    engine, settings = pg_ledger
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_outbox_done_at"))
    init_ledger(engine, settings)
    init_ledger(engine, settings)
    assert "ix_outbox_done_at" in {ix["name"] for ix in inspect(engine).get_indexes("outbox")}
