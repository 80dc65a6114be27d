"""The effect ledger: one SQLite row per side effect a fake provider performed.

A request carrying an ``Idempotency-Key`` is recorded at most once: a repeat gets
the stored response back and adds no effect (Stripe's rule, including replaying a
stored error). A request without a key is always a new effect. Every row records
the ``operation_id`` from the body, so the effects checker can find duplicates
even when no key was sent (the negative control).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = ["Effect", "EffectLedger", "IdempotencyConflict", "Recorded"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    request_sha256 TEXT NOT NULL,
    request TEXT NOT NULL,
    status_code INTEGER NOT NULL,
    response TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL NOT NULL,
    cost REAL NOT NULL DEFAULT 0,
    source TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS ix_effects_operation ON effects (operation_id);
"""


class IdempotencyConflict(Exception):
    """The same Idempotency-Key arrived with a different request body."""


@dataclass(frozen=True)
class Effect:
    id: int
    operation_id: str
    idempotency_key: str | None
    created_at: float
    request: dict[str, Any]
    status_code: int
    response: dict[str, Any]
    started_at: float = 0.0
    cost: float = 0.0
    source: str = ""  # the caller's address as the provider saw it ("" = not recorded)

    def export(self) -> dict[str, Any]:
        """The row shape of docs/architecture.md ("provider effects")."""
        return {
            "id": self.id,
            "operation_id": self.operation_id,
            "idempotency_key": self.idempotency_key,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "cost": self.cost,
            "source": self.source,
            "request": self.request,
            "response": self.response,
        }


@dataclass(frozen=True)
class Recorded:
    effect: Effect
    replayed: bool


def _sha256(request: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


def _effect(row: sqlite3.Row) -> Effect:
    return Effect(
        id=row["id"],
        operation_id=row["operation_id"],
        idempotency_key=row["idempotency_key"],
        created_at=row["created_at"],
        request=json.loads(row["request"]),
        status_code=row["status_code"],
        response=json.loads(row["response"]),
        started_at=row["started_at"],
        cost=row["cost"],
        source=row["source"],
    )


class EffectLedger:
    """Thread- and process-safe: every write is one BEGIN IMMEDIATE transaction."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # A connection per call: handlers run on a thread pool and sqlite3 handles
        # must not cross threads; opening a local file is cheap.
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            yield conn
        finally:
            conn.close()

    def record(
        self,
        operation_id: str,
        idempotency_key: str | None,
        request: dict[str, Any],
        respond: Callable[[int], tuple[int, dict[str, Any]]],
        *,
        started_at: float | None = None,
        cost: float = 0.0,
        source: str = "",
    ) -> Recorded:
        """Record one effect, or return the stored one for a repeated key.

        ``respond(effect_id)`` builds (status, body) for a new effect; it runs inside
        the transaction so a concurrent repeat of the key waits and then replays it.
        ``started_at`` is when the call reached the provider (its admission, which a
        limit checker counts); ``cost`` what the new effect was charged; ``source`` the
        caller's address.
        """
        with self._connect() as conn:
            return self._record(conn, operation_id, idempotency_key, request, respond, started_at, cost, source)

    @staticmethod
    def _record(
        conn: sqlite3.Connection,
        operation_id: str,
        idempotency_key: str | None,
        request: dict[str, Any],
        respond: Callable[[int], tuple[int, dict[str, Any]]],
        started_at: float | None,
        cost: float,
        source: str = "",
    ) -> Recorded:
        digest = _sha256(request)
        conn.execute("BEGIN IMMEDIATE")
        try:
            if idempotency_key is not None:
                row = conn.execute("SELECT * FROM effects WHERE idempotency_key = ?", (idempotency_key,)).fetchone()
                if row is not None:
                    conn.execute("COMMIT")
                    if row["request_sha256"] != digest:
                        raise IdempotencyConflict(idempotency_key)
                    return Recorded(_effect(row), replayed=True)
            next_id = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM effects").fetchone()[0]
            status, body = respond(next_id)
            now = time.time()
            cursor = conn.execute(
                "INSERT INTO effects (id, operation_id, idempotency_key, request_sha256, request,"
                " status_code, response, created_at, started_at, cost, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (next_id, operation_id, idempotency_key, digest, json.dumps(request), status, json.dumps(body), now,
                 now if started_at is None else started_at, cost, source),
            )
            row = conn.execute("SELECT * FROM effects WHERE id = ?", (cursor.lastrowid,)).fetchone()
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return Recorded(_effect(row), replayed=False)

    def for_operation(self, operation_id: str) -> list[Effect]:
        with self._connect() as conn:
            rows = conn.execute("SELECT * FROM effects WHERE operation_id = ? ORDER BY id", (operation_id,))
            return [_effect(row) for row in rows]

    def all(self) -> list[Effect]:
        with self._connect() as conn:
            return [_effect(row) for row in conn.execute("SELECT * FROM effects ORDER BY id")]
