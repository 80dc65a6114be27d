"""The answer transaction's rules on both ledgers, straight at stack/ledger/revisions.py: its
statements are compiled once per dialect and run as driver SQL (stack/ledger/prepared.py), so
PostgreSQL's SQL (pyformat parameters, FOR UPDATE OF attempts) is exercised here, not only
SQLite's. Every refusal, the replay, the superseded revision and a concurrent race."""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import pytest
from stack.embedded.postgres import PostgresServer
from sqlalchemy import Engine, event, select

from stack.config import Settings
from stack.ledger.attempts import ensure_student, finish_attempt, start_attempt
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.revisions import (REVISION_TAKEN, AnswerRejected, RevisionPolicy, RevisionReceipt, revision_row,
                                    submit_revision)
from stack.ledger.schema import answer_revisions, answers

pytestmark = pytest.mark.integration

EXAM = "NOVA-101"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with contextlib.ExitStack() as cleanup:
        url = cleanup.enter_context(PostgresServer()).url if request.param == "postgres" else ""
        settings = Settings(run_dir=tmp_path_factory.mktemp("ledger"), database_url=url, exams={EXAM: 5},
                            max_attempts=100).with_overrides(allow_default_secrets=True)
        engine = make_engine(settings, pool_size=4)
        init_ledger(engine, settings)
        yield engine
        engine.dispose()


@pytest.fixture
def attempt(ledger: Engine, request: pytest.FixtureRequest) -> str:
    student = f"s-{request.node.name[-40:]}"
    ensure_student(ledger, student)
    return start_attempt(ledger, student, EXAM, None)[0].id


def submit(ledger: Engine, attempt: str, question: str, revision: int, content: str, key: str) -> RevisionReceipt:
    return submit_revision(ledger, RevisionPolicy(), revision_row(attempt, question, revision, content, key, "web_test"))


def refusal(ledger: Engine, *args: Any) -> str:
    with pytest.raises(AnswerRejected) as refused:
        submit(ledger, *args)
    return refused.value.reason


def test_a_new_answer_is_four_statements(ledger: Engine, attempt: str) -> None:
    sent: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        sent.append(statement)

    event.listen(ledger, "before_cursor_execute", seen)
    try:
        receipt = submit(ledger, attempt, "q1", 1, "A", "k1")
    finally:
        event.remove(ledger, "before_cursor_execute", seen)
    assert (receipt.revision, receipt.current_revision, receipt.replayed) == (1, 1, False)
    data = [s for s in sent if not s.startswith("BEGIN")]  # SQLite's BEGIN IMMEDIATE is a cursor statement
    assert len(data) == 4, sent


def test_the_revision_rules_hold(ledger: Engine, attempt: str) -> None:
    first = submit(ledger, attempt, "q1", 2, "B", "k2")
    assert submit(ledger, attempt, "q1", 2, "B", "k2") == RevisionReceipt(first.receipt_id, attempt, "q1", 2, 2, True)
    late = submit(ledger, attempt, "q1", 1, "A", "k1")  # older, arriving late: logged, never current
    assert late.superseded and late.current_revision == 2
    newer = submit(ledger, attempt, "q1", 3, "C", "k3")
    assert newer.current_revision == 3 and not newer.superseded
    assert refusal(ledger, attempt, "q1", 3, "C", "other-key") == REVISION_TAKEN
    assert refusal(ledger, attempt, "q1", 3, "D", "k3") == AnswerRejected.KEY_OTHER_BODY
    assert refusal(ledger, attempt, "q2", 1, "C", "k3") == AnswerRejected.KEY_OTHER_QUESTION
    assert refusal(ledger, "no-such-attempt", "q1", 1, "A", "k9") == AnswerRejected.UNKNOWN_ATTEMPT
    with ledger.connect() as conn:
        current = conn.execute(select(answers.c.revision, answers.c.content).where(answers.c.attempt_id == attempt)).all()
        logged = conn.execute(select(answer_revisions.c.revision).where(answer_revisions.c.attempt_id == attempt)).scalars()
        assert [tuple(row) for row in current] == [(3, "C")] and sorted(logged) == [1, 2, 3]


def test_a_finished_attempt_takes_no_new_revision_but_replays(ledger: Engine, attempt: str) -> None:
    accepted = submit(ledger, attempt, "q1", 1, "A", "k1")
    finish_attempt(ledger, attempt, "web_test")
    assert refusal(ledger, attempt, "q2", 1, "B", "k2") == AnswerRejected.FINISHED
    assert submit(ledger, attempt, "q1", 1, "A", "k1").receipt_id == accepted.receipt_id


def test_racing_writers_of_one_question_leave_one_row_per_revision(ledger: Engine, attempt: str) -> None:
    """Six writers of revision 1 of one question under six keys: one is accepted, the others are
    told the revision is taken (PostgreSQL: the row lock, or a lost insert race read again)."""
    barrier = threading.Barrier(6)

    def write(n: int) -> str:
        barrier.wait()
        try:
            return submit(ledger, attempt, "q4", 1, f"content {n}", f"key-{n}").receipt_id
        except AnswerRejected as refused:
            return refused.reason

    with ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(write, range(6)))
    assert sorted(outcomes).count(REVISION_TAKEN) == 5, outcomes
    with ledger.connect() as conn:
        rows = conn.execute(select(answer_revisions.c.receipt_id).where(
            answer_revisions.c.attempt_id == attempt, answer_revisions.c.question == "q4")).scalars().all()
    assert rows == [o for o in outcomes if o != REVISION_TAKEN]

