"""Who gets the SQLite ledger's write lock next: a queue in the kernel, not SQLite's busy handler.

Every process of the stack that writes the ledger (web nodes, relay, workers, their horses)
takes SQLite's one write lock with ``BEGIN IMMEDIATE``. When it is taken, SQLite's default
busy handler sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50 ms and then 100 ms at a time
before it looks again. A writer that met the lock late in a busy stretch therefore slept for
0.23 + k x 0.1 s even when the lock had been free again long before, and nobody kept order:
a newcomer could take the lock while an old waiter slept. Measured (issue #23, docs/ramp.md
"Where the stalls came from"): ledger writers' waits for the lock sat on 0.23, 0.34, 0.44,
0.54, 0.65 ... s, the answer latencies on the same steps.

``QueuedWriters`` makes every writer first take an exclusive ``flock`` on a file beside the
ledger (``<ledger>.writers``) and only then issue ``BEGIN IMMEDIATE``; it lets go right after
COMMIT or ROLLBACK. A writer that has to wait sleeps in the kernel and is woken the moment the
holder lets go, so it waits for the writers ahead of it and not a moment longer. The lock
belongs to the open file, so a process that dies (SIGKILL included) lets go with it. SQLite's
busy timeout stays behind it, for writers that do not queue (a sqlite3 shell, an old process).

The wait keeps SQLite's deadline: a writer that has not reached the head of the queue within
the busy timeout gives up with SQLite's own "database is locked" (a 503 with Retry-After on a
web node, tests/security/test_f7_ledger_busy.py), exactly as the busy handler gave up before.
A contended wait sleeps in ``flock`` on a helper thread while the writer waits on an event
with that timeout; a helper whose writer gave up lets go the moment it gets the lock.

``BusyHandlerWriters`` is the behaviour before, kept so a test can show the difference.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from pathlib import Path

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import OperationalError

__all__ = ["BusyHandlerWriters", "QueuedWriters", "WriterPolicy", "lock_path_of"]

_HELD = "proctor_writer_queue_fd"  # key in the pooled connection's info: the flock we hold
_HOLDER = "proctor_writer_queue_thread"  # and the thread that took it
_HOLDING_THREADS: set[int] = set()  # threads (idents) that hold the queue through some connection


def lock_path_of(database: str | None) -> Path | None:
    """The queue's file for an on-disk SQLite ledger; None for an in-memory one (one process)."""
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    return Path(f"{database}.writers")


class WriterPolicy:
    """How a write transaction of this engine starts and ends; chosen once, in make_engine."""

    name = "abstract"

    def attach(self, engine: Engine) -> None:
        raise NotImplementedError


class BusyHandlerWriters(WriterPolicy):
    """BEGIN IMMEDIATE and nothing else: waiters poll the lock in SQLite's busy handler."""

    name = "busy-handler"

    def attach(self, engine: Engine) -> None:
        event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))


class QueuedWriters(WriterPolicy):
    """Writers queue on an flock before BEGIN IMMEDIATE and let go right after it ends."""

    name = "queued"

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout  # seconds: SQLite's busy timeout of the same engine

    def attach(self, engine: Engine) -> None:
        path = lock_path_of(engine.url.database)
        if path is None:
            BusyHandlerWriters().attach(engine)
            return
        event.listen(engine, "begin", lambda conn: self._begin(conn, path, self.timeout))
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._rollback)
        # a safety net: a connection that goes back to its pool still queued lets go there
        event.listen(engine, "checkin", lambda _dbapi, record: self._release(record.info))

    @staticmethod
    def _begin(conn: Connection, path: Path, timeout: float) -> None:
        # A thread that already holds the queue through another connection would wait for itself
        # for ever; it goes straight to SQLite, whose busy timeout ends that wait as it always did.
        me = threading.get_ident()
        if _HELD not in conn.info and me not in _HOLDING_THREADS:
            conn.info[_HELD], conn.info[_HOLDER] = _take(path, timeout), me
            _HOLDING_THREADS.add(me)
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            QueuedWriters._release(conn.info)
            raise

    @staticmethod
    def _commit(conn: Connection) -> None:
        # COMMIT here, through SQLAlchemy (errors arrive wrapped, as from any statement), so the
        # lock goes right after it; the DB-API commit() SQLAlchemy calls next finds nothing open.
        try:
            conn.exec_driver_sql("COMMIT")
        finally:
            QueuedWriters._release(conn.info)

    @staticmethod
    def _rollback(conn: Connection) -> None:
        try:
            dbapi = conn.connection.dbapi_connection
            if dbapi is not None and dbapi.in_transaction:
                dbapi.rollback()
        except Exception:  # noqa: BLE001 - SQLAlchemy's own rollback right after reports it
            pass
        finally:
            QueuedWriters._release(conn.info)

    @staticmethod
    def _release(info: dict) -> None:
        fd = info.pop(_HELD, None)
        if fd is not None:
            os.close(fd)  # closing the file lets go of its flock
            _HOLDING_THREADS.discard(info.pop(_HOLDER, None))


def _take(path: Path, timeout: float) -> int:
    """Open the queue's file (0600, like the ledger) and get its flock within ``timeout`` seconds."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd  # nobody ahead: the common case costs one system call
    except BlockingIOError:
        pass
    except BaseException:
        os.close(fd)
        raise
    return _wait_in_queue(fd, timeout)


def _wait_in_queue(fd: int, timeout: float) -> int:
    """Sleep in the kernel's queue on a helper thread (flock itself has no timeout); give up at
    ``timeout`` with SQLite's own busy error, and leave the helper to let go once it gets the lock."""
    got = threading.Event()
    state = {"abandoned": False}
    guard = threading.Lock()

    def wait() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # releases the GIL while it waits
        except OSError:
            pass
        with guard:
            if state["abandoned"]:
                os.close(fd)  # its writer gave up: the next in the queue goes on at once
                return
            got.set()

    threading.Thread(target=wait, name="ledger-writers-queue", daemon=True).start()
    if got.wait(timeout):
        return fd
    with guard:
        if got.is_set():  # it arrived while we gave up: take it after all
            return fd
        state["abandoned"] = True
    raise OperationalError("BEGIN IMMEDIATE", None, sqlite3.OperationalError("database is locked"))
