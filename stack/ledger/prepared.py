"""Statements of the hot paths, compiled once per dialect and run as driver SQL.

``conn.execute(select(...))`` builds the statement, computes its cache key and looks the
compiled form up on every call; on a web node that was about a quarter of the CPU of an
answer (py-spy: ``HasCacheKey._generate_cache_key``, ``coercions.expect``; docs/ramp.md).
A ``Prepared`` statement is written once in SQLAlchemy Core with named ``bindparam``s,
compiled the first time it meets a dialect, and then handed to the driver as its SQL string
through ``conn.exec_driver_sql``: the same engine, pool, transaction and events as before,
and SQLAlchemy still wraps driver errors (``IntegrityError``, ``OperationalError``), which
the retry on a lost insert race and the 503 on a busy ledger rely on. Rows come back without
SQLAlchemy's type processing, so only plain columns (text, integers, floats) are read this way.
``loadtests/bench_answer_path.py`` measures it against the alternatives.
"""

from __future__ import annotations

from typing import Any, Mapping

from sqlalchemy import Connection, CursorResult
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import Executable

__all__ = ["Prepared"]


class Prepared:
    """One Core statement, compiled once per dialect; ``run`` takes the parameters by name."""

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._compiled: dict[tuple[str, str], tuple[str, tuple[str, ...] | None]] = {}

    def run(self, conn: Connection, params: Mapping[str, Any]) -> CursorResult[Any]:
        sql, order = self._for(conn.dialect)
        if order is None:  # a named paramstyle (psycopg's pyformat): the mapping as it is
            return conn.exec_driver_sql(sql, dict(params))
        return conn.exec_driver_sql(sql, tuple(params[name] for name in order))

    def sql(self, dialect: Dialect) -> str:
        """The SQL the driver is given on ``dialect`` (tests and the benchmark print it)."""
        return self._for(dialect)[0]

    def _for(self, dialect: Dialect) -> tuple[str, tuple[str, ...] | None]:
        key = (dialect.name, dialect.paramstyle)
        found = self._compiled.get(key)
        if found is None:  # two threads may both compile it once: same result, no lock needed
            compiled = self.statement.compile(dialect=dialect)
            order = tuple(compiled.positiontup or ()) if compiled.positional else None
            found = self._compiled[key] = (compiled.string, order)
        return found
