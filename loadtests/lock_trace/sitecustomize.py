"""Trace who holds the SQLite ledger's write lock, and for how long (bench_ramp.py --lock-trace).

Python imports a ``sitecustomize`` module from ``sys.path`` at start-up. ``bench_ramp.py`` puts
this folder on the stack's ``PYTHONPATH`` and sets ``PROCTOR_LOCK_TRACE_DIR``; every process of
the stack (web nodes, relay, workers, their horses) then logs each write transaction it runs:
when it asked for the lock (``BEGIN IMMEDIATE`` sent), when it got it (``BEGIN IMMEDIATE``
returned), when it let go (``COMMIT`` or ``ROLLBACK`` returned), how many statements ran in
between and the first of them. One tab-separated file per process; ``loadtests/lock_report.py``
reads them. Without the variable nothing is wrapped. It wraps ``sqlite3.connect`` (and the
``dbapi2`` alias SQLAlchemy calls), so a connection made with its own ``factory=`` is not traced.

Measurement only: the wrapper costs a few microseconds a statement, which the trace's own run
pays (docs/ramp.md, "The 300 req/s tail").
"""

from __future__ import annotations

import os
import sqlite3
import sqlite3.dbapi2
import threading
import time

FIELDS = ("pid", "component", "thread", "asked", "got", "released", "statements", "outcome", "first")


def _install(folder: str) -> None:
    state = threading.local()  # the transaction open on this thread: [asked, got, statements, first]
    out_lock = threading.Lock()
    files: dict[int, object] = {}  # pid -> file: a forked horse opens its own

    def emit(outcome: str) -> None:
        tx, state.tx = state.tx, None
        released = time.time()
        pid = os.getpid()
        component = os.environ.get("PROCTOR_COMPONENT", "") or "unknown"
        first = (tx[3] or "").replace("\t", " ")
        with out_lock:
            if pid not in files:
                files[pid] = open(os.path.join(folder, f"{component}-{pid}.tsv"), "a", buffering=1)  # open for the process's life
            files[pid].write(f"{pid}\t{component}\t{threading.get_ident()}\t{tx[0]:.6f}\t{tx[1]:.6f}\t"
                             f"{released:.6f}\t{tx[2]}\t{outcome}\t{first}\n")

    class TracedCursor(sqlite3.Cursor):
        def execute(self, sql, *args):  # type: ignore[override]
            head = sql.lstrip()[:16].upper()
            tx = getattr(state, "tx", None)
            if head.startswith("BEGIN IMMEDIATE"):
                asked = time.time()
                result = super().execute(sql, *args)
                state.tx = [asked, time.time(), 0, None]
                return result
            if tx is not None and (head.startswith("COMMIT") or head.startswith("ROLLBACK")):
                result = super().execute(sql, *args)
                emit(head.split()[0].lower())
                return result
            if tx is not None:
                tx[2] += 1
                tx[3] = tx[3] or " ".join(sql.split())[:80]
            return super().execute(sql, *args)

    class TracedConnection(sqlite3.Connection):
        def cursor(self, factory=TracedCursor):  # type: ignore[override]
            return super().cursor(factory)

        def commit(self) -> None:
            super().commit()
            if getattr(state, "tx", None) is not None:
                emit("commit")

        def rollback(self) -> None:
            super().rollback()
            if getattr(state, "tx", None) is not None:
                emit("rollback")

    plain = sqlite3.connect

    def connect(*args, **kwargs):
        kwargs.setdefault("factory", TracedConnection)
        return plain(*args, **kwargs)

    sqlite3.connect = connect
    sqlite3.dbapi2.connect = connect


if os.environ.get("PROCTOR_LOCK_TRACE_DIR"):
    os.makedirs(os.environ["PROCTOR_LOCK_TRACE_DIR"], exist_ok=True)
    _install(os.environ["PROCTOR_LOCK_TRACE_DIR"])
