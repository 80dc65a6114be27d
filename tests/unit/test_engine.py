"""The SQLite ledger engines: writers take the write lock up front; readers never wait for it."""

import fcntl
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, OperationalError

from stack.config import Settings
from stack.ledger import engine as engine_module
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.write_queue import BusyHandlerWriters, QueuedWriters, lock_path_of
from stack.ledger.schema import exams, students


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    current = Settings(run_dir=tmp_path, ledger_writers="queued")  # these tests examine the writers' queue
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


def _queued_in_kernel(lock_file: Path) -> bool:
    """A writer sleeps in the kernel's queue for the ledger's writers file (/proc/locks '->')."""
    inode = f":{lock_file.stat().st_ino} "
    return any("->" in line and "FLOCK" in line and inode in line
               for line in Path("/proc/locks").read_text().splitlines())


def _second_writer_while_held(settings: Settings, writers) -> tuple[bool, BaseException | None]:  # type: ignore[no-untyped-def]
    """Hold the write lock, start a second writer, and report whether it was seen waiting in
    the kernel's queue and how its transaction ended once the first let go."""
    holder, second = make_engine(settings, writers=writers), make_engine(settings, writers=writers)
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            with second.begin() as conn:
                conn.execute(students.insert().values(id="s-second", created_at=time.time()))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome.append(exc)

    with holder.begin() as held:
        held.execute(students.insert().values(id="s-held", created_at=time.time()))
        thread = threading.Thread(target=write)
        thread.start()
        lock_file = lock_path_of(str(settings.run_dir / "ledger.db"))
        queued = False
        while thread.is_alive() and not queued:  # no clock: it either queues or gives up
            queued = lock_file is not None and lock_file.exists() and _queued_in_kernel(lock_file)
            time.sleep(0.002)
    thread.join()
    return queued, outcome[0]


def test_a_waiting_writer_queues_in_the_kernel_not_in_sqlites_busy_handler(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a 1 ms busy timeout, a writer that polled SQLite's lock would give up at once; the
    queued one sleeps on the flock for as long as the first holds it, then commits."""
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_MS", 1)
    queued, error = _second_writer_while_held(settings, QueuedWriters(timeout=60))
    assert queued and error is None
    with make_engine(settings, read_only=True).connect() as conn:
        assert {row.id for row in conn.execute(select(students))} >= {"s-held", "s-second"}


def test_control_sqlites_busy_handler_gives_up_while_the_lock_is_held(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the behaviour before the queue; the same check sees no queue and a lock error."""
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_MS", 1)
    queued, error = _second_writer_while_held(settings, BusyHandlerWriters())
    assert not queued and isinstance(error, OperationalError) and "locked" in str(error)


def test_a_failed_transaction_lets_the_queue_go(settings: Settings) -> None:
    """A rollback (here: a duplicate key) lets go of the flock, so the next writer is not stuck."""
    writer = make_engine(settings)
    with pytest.raises(IntegrityError):
        with writer.begin() as conn:
            conn.execute(exams.insert().values(code="NOVA-101", question_count=1))
    lock_file = lock_path_of(str(settings.run_dir / "ledger.db"))
    assert lock_file is not None
    with open(lock_file) as probe:  # a non-blocking try succeeds only if nobody holds it
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_thread_writing_through_two_connections_does_not_wait_for_itself(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue is per thread: a second connection of the holding thread skips it and meets
    SQLite's lock, which refuses after the busy timeout, as before the queue (never a hang)."""
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_MS", 1)
    writer, second = make_engine(settings), make_engine(settings)
    with writer.begin() as held:
        held.execute(students.insert().values(id="s-held", created_at=time.time()))
        with pytest.raises(OperationalError, match="locked"):
            with second.begin() as conn:
                conn.execute(students.insert().values(id="s-other", created_at=time.time()))
    with second.begin() as conn:  # the thread's queue slot was given back with the first
        conn.execute(students.insert().values(id="s-after", created_at=time.time()))


def test_a_writer_gives_up_at_the_busy_timeout_and_the_queue_moves_on(settings: Settings) -> None:
    """The queue keeps SQLite's deadline ("database is locked", a 503 on a node); the waiter
    that gave up lets go as soon as it reaches the head, so the next writer is not stuck."""
    holder, impatient = make_engine(settings), make_engine(settings, writers=QueuedWriters(timeout=0.05))
    errors: list[BaseException] = []

    def write_impatiently() -> None:  # another thread: the holder's own thread would skip the queue
        try:
            with impatient.begin() as conn:
                conn.execute(students.insert().values(id="s-impatient", created_at=time.time()))
        except OperationalError as exc:
            errors.append(exc)

    with holder.begin() as held:
        held.execute(students.insert().values(id="s-held", created_at=time.time()))
        thread = threading.Thread(target=write_impatiently)
        thread.start()
        thread.join()  # the holder keeps the lock until the impatient writer has given up
    assert len(errors) == 1 and "database is locked" in str(errors[0])
    with make_engine(settings).begin() as conn:  # would wait for the abandoned helper if it kept the lock
        conn.execute(students.insert().values(id="s-next", created_at=time.time()))
