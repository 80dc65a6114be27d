"""A held ledger write lock: every writer of the ledger waits for a while (issue #23).

What a long checkpoint, a backup or a migration does to a shared ledger: the harness opens
the run's ledger itself and holds its write lock for the fault's duration. On SQLite that is
``BEGIN IMMEDIATE`` (readers go on in WAL mode; every writer waits in its busy handler); on
PostgreSQL ``LOCK TABLE attempts IN EXCLUSIVE MODE``, which an answer's ``SELECT ... FOR
UPDATE`` of its attempt waits for. The end rolls back: the holder wrote nothing.

Answers that arrive meanwhile wait for the lock in their node. The answer sinks differ in what
the client has heard by then: the durable ones nothing (the 2xx follows the commit), the
negative control ``ack-at-enqueue`` a receipt. Killing a node inside the hold tells them apart.

``params``: none. The hold must stay shorter than the nodes' busy timeout
(``stack.ledger.engine.SQLITE_BUSY_TIMEOUT_MS``) or a waiting writer gives up; ``start`` refuses
a longer one.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from chaos.nemesis.base import FaultSpec, NemesisError
from stack.ledger.engine import SQLITE_BUSY_TIMEOUT_MS

if TYPE_CHECKING:
    from chaos.deployment import Deployment

__all__ = ["LedgerNemesis"]

_LOCK_STATEMENTS = {
    "sqlite": ("BEGIN IMMEDIATE",),
    "postgresql": ("BEGIN", "LOCK TABLE attempts IN EXCLUSIVE MODE"),
}


class LedgerNemesis:
    kinds = frozenset({"ledger_lock"})

    def __init__(self, stack: Deployment) -> None:
        self.stack = stack
        self._engine: Engine | None = None
        self._held: Connection | None = None
        self._since = 0.0
        self._lock = threading.Lock()  # start and end may run on different threads of the runner

    def _connect(self) -> Connection:
        if self._engine is None:
            url = self.stack.settings.ledger_url
            self._engine = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        return self._engine.connect()

    def start(self, fault: FaultSpec) -> dict[str, Any]:
        if fault.target != "ledger":
            raise NemesisError(f"ledger_lock: the target is 'ledger', not {fault.target!r}")
        if fault.duration * 1000 >= SQLITE_BUSY_TIMEOUT_MS:
            raise NemesisError(f"ledger_lock: a {fault.duration} s hold outlasts the writers' busy timeout "
                               f"({SQLITE_BUSY_TIMEOUT_MS / 1000:g} s); they would fail instead of waiting")
        with self._lock:
            if self._held is not None:
                raise NemesisError("ledger_lock: the lock is already held by an earlier fault")
            conn = self._connect()
            dialect = conn.engine.dialect.name
            statements = _LOCK_STATEMENTS.get(dialect)
            if statements is None:
                conn.close()
                raise NemesisError(f"ledger_lock: no lock statement for a {dialect} ledger")
            for statement in statements:
                conn.exec_driver_sql(statement)
            self._held, self._since = conn, time.time()
        return {"held_from": self._since, "dialect": dialect}

    def end(self, fault: FaultSpec) -> dict[str, Any]:
        return self._release()

    def heal(self) -> None:
        self._release()
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def _release(self) -> dict[str, Any]:
        with self._lock:
            conn, self._held = self._held, None
            if conn is None:
                return {}
            try:
                conn.exec_driver_sql("ROLLBACK")
            finally:
                conn.close()
            return {"held_seconds": round(time.time() - self._since, 3)}
