"""The lean answer path (issue #23 item 2): one ledger transaction of four statements for a new
answer, one threadpool hop per answer, ownership read once per attempt and node, statements
compiled once per dialect. Each figure here was higher before (7 statements and an ownership
read per answer, 3 hops), so these tests fail on that code."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import pytest
from sqlalchemy import Engine, event
from sqlalchemy.dialects import postgresql, sqlite
from web_support import TestClient, answer, count_rows, start, token_for

from stack.ledger import revisions
from stack.ledger.prepared import Prepared
from stack.ledger.schema import answer_revisions, answers, attempts
from stack.web.routes.common import AttemptOwners

NEW_ANSWER_STATEMENTS = 5
"""BEGIN IMMEDIATE, the attempt with the question's current revision, the colliding revisions,
the log row and the current value (COMMIT is not a cursor statement)."""


class Statements:
    """SQL statements sent through an engine while the block runs."""

    def __init__(self, engine: Engine) -> None:
        self.engine, self.sent = engine, []

    def __enter__(self) -> list[str]:
        event.listen(self.engine, "before_cursor_execute", self._seen)
        return self.sent

    def __exit__(self, *_exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        self.sent.append(statement)


@pytest.fixture
def node_engines(app_client: TestClient) -> tuple[Engine, Engine]:
    state = app_client.app.state.proctor  # type: ignore[attr-defined]
    return state.engine, state.read_engine


def test_a_new_answer_is_one_transaction_of_four_statements(app_client: TestClient,
                                                            node_engines: tuple[Engine, Engine]) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    assert answer(app_client, token, attempt, "q1", "A").status_code == 201  # the attempt's first: owner read
    write, read = node_engines
    with Statements(write) as written, Statements(read) as reads:
        assert answer(app_client, token, attempt, "q2", "B").status_code == 201
    assert len(written) == NEW_ANSWER_STATEMENTS, written
    assert written[0].startswith("BEGIN IMMEDIATE")
    assert reads == []  # the owner is remembered, exam rules and question counts are cached


def test_a_newer_revision_updates_the_current_value_in_as_many_statements(
        app_client: TestClient, node_engines: tuple[Engine, Engine], ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    answer(app_client, token, attempt, "q1", "A", key="k1")
    with Statements(node_engines[0]) as written:
        response = app_client.put(f"/v1/attempts/{attempt}/answers/q1", json={"content": "B", "revision": 2},
                                  headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "k2"})
    assert response.status_code == 201 and response.json()["current_revision"] == 2
    assert len(written) == NEW_ANSWER_STATEMENTS and written[-1].startswith("UPDATE answers")
    assert count_rows(ledger, answers) == 1 and count_rows(ledger, answer_revisions) == 2


def test_an_answer_takes_one_threadpool_hop(app_client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit, the ownership check and the write share one hop; the rest runs on the loop."""
    token = token_for(app_client)
    attempt = start(app_client, token)
    hops: list[str] = []
    real = anyio.to_thread.run_sync

    async def counted(func: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(func, "__name__", repr(func)))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    assert answer(app_client, token, attempt, "q1", "A").status_code == 201
    assert len(hops) == 1, hops


def test_a_remembered_owner_never_lets_another_student_in(app_client: TestClient, ledger: Engine) -> None:
    """The owner's answers fill the node's memory; another student's token still meets the 404
    of an unknown attempt, and nothing of theirs is written."""
    owner, other = token_for(app_client, "s-1"), token_for(app_client, "s-2")
    attempt = start(app_client, owner)
    assert answer(app_client, owner, attempt, "q1", "A").status_code == 201
    refused = answer(app_client, other, attempt, "q2", "B")
    assert refused.status_code == 404 and refused.json()["detail"] == "unknown attempt"
    other_exam = token_for(app_client, "s-1", "NOVA-102")  # the same student, another exam's token
    assert answer(app_client, other_exam, attempt, "q2", "B").status_code == 404
    assert count_rows(ledger, answer_revisions) == 1


def test_owners_are_read_once_and_the_oldest_forgotten(ledger: Engine, app_client: TestClient) -> None:
    ids = [start(app_client, token_for(app_client, f"s-{n}")) for n in range(1, 4)]
    owners = AttemptOwners(ledger, kept=2)
    assert owners.owner_of(ids[0]) == ("s-1", "NOVA-101") and owners.owner_of(ids[0]) == ("s-1", "NOVA-101")
    assert owners.reads == 1
    owners.owner_of(ids[1])
    owners.owner_of(ids[2])  # over the bound: ids[0], the oldest, is forgotten
    assert owners.reads == 3
    owners.owner_of(ids[0])
    assert owners.reads == 4


def test_unknown_attempts_are_not_remembered(ledger: Engine) -> None:
    owners = AttemptOwners(ledger)
    assert owners.owner_of("no-such-attempt") is None and owners.owner_of("no-such-attempt") is None
    assert owners.reads == 2


def test_a_prepared_statement_compiles_once_per_dialect(monkeypatch: pytest.MonkeyPatch) -> None:
    statement = Prepared(attempts.select().where(attempts.c.id == "x"))
    compiled: list[str] = []
    real = type(statement.statement).compile

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        compiled.append(kwargs["dialect"].name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(statement.statement), "compile", counting)
    for _ in range(3):
        statement.sql(sqlite.dialect())
        statement.sql(postgresql.dialect())
    assert compiled == ["sqlite", "postgresql"]


def test_postgresql_still_locks_the_attempt_row() -> None:
    """Answers and the finish of one attempt serialise on its row on PostgreSQL (SQLite on its
    write lock): the lean read keeps FOR UPDATE there."""
    assert "FOR UPDATE OF attempts" in revisions._ATTEMPT_AND_CURRENT.sql(postgresql.dialect())


def test_the_collision_read_uses_both_unique_indexes(ledger: Engine) -> None:
    """One read finds a replay (by key) and a taken revision (by question and revision): SQLite
    answers the OR from the two unique indexes, never by scanning the log."""
    statement = revisions._COLLIDING_REVISIONS
    with ledger.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement.sql(conn.dialect),
                                    tuple("x" for _ in statement._for(conn.dialect)[1] or ())).all()
    details = [row[-1] for row in plan]
    assert any("MULTI-INDEX OR" in d for d in details), details
    assert not any(d.startswith("SCAN") for d in details), details

