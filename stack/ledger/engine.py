"""One SQLAlchemy engine per process, with the durability settings the ledger needs."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import CreateIndex

from stack.config import Settings
from stack.ledger import answer_keys, exam_rules
from stack.ledger.schema import IX_OUTBOX_DONE_AT, exams, metadata
from stack.ledger.write_queue import BusyHandlerWriters, QueuedWriters, WriterPolicy

__all__ = ["make_engine", "make_reader", "init_ledger"]

SQLITE_BUSY_TIMEOUT_MS = 10_000


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    # WAL lets readers and one writer proceed together across processes; FULL fsyncs
    # every commit so an acknowledged answer survives a power cut, not just a crash.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_query_only(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA query_only=ON")  # a write through the read engine fails loudly
    cursor.close()


def _create_private(path: Path) -> None:
    """Create the SQLite file 0600 before SQLite does (it holds every answer); SQLite gives
    its -wal and -shm files the main file's permissions."""
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))


def _writer_policy(name: str) -> WriterPolicy:
    return QueuedWriters(SQLITE_BUSY_TIMEOUT_MS / 1000) if name == "queued" else BusyHandlerWriters()


def make_engine(settings: Settings, *, read_only: bool = False, pool_size: int = 0,
                writers: WriterPolicy | None = None) -> Engine:
    """The ledger engine. ``read_only`` (SQLite): plain deferred BEGIN and ``query_only``, so
    status polls, exports and metrics read a WAL snapshot instead of queueing for the write
    lock behind answers; PostgreSQL readers never take that lock, so it changes nothing there.

    ``pool_size`` (SQLite): 0 opens a connection per transaction (processes that fork, like
    RQ workers, must not inherit one); N > 0 keeps up to N open connections for a
    long-lived multi-threaded process (a web node), each used by one thread at a time. It
    saves the open and the pragmas every transaction otherwise pays (two per answer). Past N
    a connection is opened and closed as before (no overflow limit, so never a pool
    timeout). Every pragma, durability included, is set on each connection as it opens.

    ``writers`` (SQLite): how write transactions wait for the write lock; by default the policy
    ``settings.ledger_writers`` names (PROCTOR_LEDGER_WRITERS: SQLite's busy handler, or the
    kernel queue of stack/ledger/write_queue.py)."""
    url = settings.ledger_url
    if url.startswith("sqlite"):
        settings.run_dir.mkdir(parents=True, exist_ok=True)
        if not settings.database_url:  # the run folder's own ledger.db
            _create_private(settings.run_dir / "ledger.db")
        connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
        if pool_size > 0:  # a pooled handle moves between threads, never used by two at once
            engine = create_engine(url, pool_size=pool_size, max_overflow=-1,
                                   connect_args={**connect_args, "check_same_thread": False})
        else:
            engine = create_engine(url, poolclass=NullPool, connect_args=connect_args)
        event.listen(engine, "connect", _sqlite_pragmas)
        if read_only:
            event.listen(engine, "connect", _sqlite_query_only)
        # pysqlite's own transaction handling defers BEGIN; emit it ourselves so that
        # read-then-write transactions take the write lock up front (BEGIN IMMEDIATE).
        if read_only:
            event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN"))
        else:
            (writers or _writer_policy(settings.ledger_writers)).attach(engine)

        @event.listens_for(engine, "connect")
        def _no_autobegin(dbapi_connection, _record):  # type: ignore[no-untyped-def]
            dbapi_connection.isolation_level = None

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)


def make_reader(settings: Settings, engine: Engine, *, pool_size: int = 0) -> Engine:
    """The read-only twin of ``engine`` for a process's scans: on SQLite a WAL snapshot that
    never takes the write lock (a scan of thousands of rows under BEGIN IMMEDIATE made every
    answer and merit card queue behind it); PostgreSQL readers take no write lock, so there it
    is ``engine`` itself and a process keeps one pool. ``pool_size`` as for ``make_engine``."""
    return make_engine(settings, read_only=True, pool_size=pool_size) if engine.dialect.name == "sqlite" else engine


def init_ledger(engine: Engine, settings: Settings) -> None:
    """Create tables and provision the configured exams (row, secret answer key, rules); safe
    to run from every process at start: what exists stays, and a race loses to the first commit."""
    metadata.create_all(engine)
    with engine.begin() as conn:
        # create_all adds indexes only with their table: a ledger made before this index gets it here
        conn.execute(CreateIndex(IX_OUTBOX_DONE_AT, if_not_exists=True))
        existing = {row.code for row in conn.execute(exams.select())}
        for code, count in settings.exams.items():
            if code not in existing:
                conn.execute(exams.insert().values(code=code, question_count=count))
    for code, count in settings.exams.items():
        try:
            with engine.begin() as conn:
                answer_keys.provision_key(conn, code, count)
                exam_rules.provision_policy(conn, code, settings.exam_window, settings.max_attempts,
                                            settings.exam_grace_seconds, time.time())
        except IntegrityError:
            pass  # another process provisioned this exam at the same moment: its rows stand
