"""The AI-backlog seeding path (stack/ledger/backlog.py): the ledger state of real finishes.

What the relay then enqueues is decided by the same SQL as for a real exam
(``outbox.enqueueable``), so these tests pin the state, and that the relay's rule picks
exactly the narrative and SMS rows of every seeded attempt and no merit row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import Engine, func, select

from stack.config import Settings
from stack.ledger import outbox as outbox_rows
from stack.ledger.backlog import backlog_exam, main, seed_backlog
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.schema import attempts, outbox, outcomes


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    settings = Settings(run_dir=tmp_path)
    engine = make_engine(settings)
    init_ledger(engine, settings)
    yield engine
    engine.dispose()


def _count(engine: Engine, table, *where) -> int:  # a sqlalchemy Table
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()


def test_seeded_attempts_are_finished_with_three_rows_and_a_ready_merit_card(engine: Engine) -> None:
    seeded = seed_backlog(engine, 25, per_exam=10)
    assert (seeded.attempts, seeded.exams) == (25, 3)
    assert _count(engine, attempts, attempts.c.status == "finished") == 25
    assert _count(engine, outbox) == 75
    assert _count(engine, outbox, outbox.c.kind == "merit", outbox.c.status == "done") == 25
    assert _count(engine, outbox, outbox.c.kind != "merit", outbox.c.status == "pending") == 50
    assert _count(engine, outcomes, outcomes.c.kind == "merit", outcomes.c.status == "ready") == 25


def test_the_relay_rule_enqueues_every_narrative_and_no_merit_row(engine: Engine) -> None:
    seed_backlog(engine, 12, per_exam=5)
    with engine.connect() as conn:
        ready = outbox_rows.enqueueable(conn, limit=100)
    assert sorted({row["kind"] for row in ready}) == ["narrative", "sms"]
    assert sum(row["kind"] == "narrative" for row in ready) == 12


def test_cards_rank_within_their_small_exam(engine: Engine) -> None:
    seed_backlog(engine, 7, per_exam=3)
    with engine.connect() as conn:
        payloads = [row.payload for row in conn.execute(select(outcomes.c.payload))]
    assert all('"finished_attempts": 3' in p or '"finished_attempts": 1' in p or '"finished_attempts": 2' in p
               for p in payloads)
    assert backlog_exam(6, 3) == "BACKLOG-0003"


@pytest.mark.parametrize("count, per_exam, field", [(0, 10, "count"), (5, 0, "per_exam")])
def test_a_bad_size_names_the_field(engine: Engine, count: int, per_exam: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        seed_backlog(engine, count, per_exam)


def test_the_command_refuses_a_bad_count(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--count", "0"])
    assert "count=0" in capsys.readouterr().err
