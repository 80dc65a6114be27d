"""The SQLite ledger engines: writers take the write lock up front; readers never wait for it."""

import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from stack.config import Settings
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.schema import exams, students


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    current = Settings(run_dir=tmp_path)
    init_ledger(make_engine(current), current)
    return current


def test_a_read_does_not_wait_for_a_writer_holding_the_lock(settings: Settings) -> None:
    writer, reader = make_engine(settings), make_engine(settings, read_only=True)
    with writer.begin() as held:  # BEGIN IMMEDIATE: the write lock is ours until commit
        held.execute(students.insert().values(id="s-held", created_at=time.time()))
        # This thread holds the write lock until the block ends, so a read that needed it
        # could never get it: it would fail with "database is locked" after the busy timeout
        # (the next test shows a writer-style BEGIN doing exactly that). Reading at all proves it.
        with reader.connect() as conn:
            codes = [row.code for row in conn.execute(select(exams))]
            seen = conn.execute(select(students)).all()
    assert codes == ["NOVA-101"] and seen == []  # a snapshot without the uncommitted row


def test_writer_style_begin_does_wait_for_the_lock(settings: Settings) -> None:
    """The control: a BEGIN IMMEDIATE, as the write engine issues, is refused while the lock is held."""
    writer = make_engine(settings)
    with writer.begin() as held:
        held.execute(students.insert().values(id="s-held", created_at=time.time()))
        other = sqlite3.connect(settings.run_dir / "ledger.db", timeout=0.2, isolation_level=None)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        finally:
            other.close()


def test_the_read_engine_refuses_writes(settings: Settings) -> None:
    with pytest.raises(OperationalError, match="readonly|read-only|query_only|attempt to write"):
        with make_engine(settings, read_only=True).begin() as conn:
            conn.execute(students.insert().values(id="s-1", created_at=time.time()))
