"""Scores stored at finish, and merit ranking from them (stack/ledger/ranking.py).

The merit job used to re-read and re-score every answer of the exam per card: O(ledger).
These tests pin what replaced it: finish stores the score it would compute, ranking reads
the stored scores and touches ``answers`` only for attempts that have none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import Engine, event, select, update

from stack.config import Settings
from stack.ledger.ranking import merit_of
from stack.ledger import answer_keys, grading
from stack.ledger.attempts import ensure_student, finish_attempt, start_attempt
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.revisions import RevisionPolicy, revision_row, submit_revision
from stack.ledger.schema import attempts

EXAM = "NOVA-101"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    settings = Settings(run_dir=tmp_path, exams={EXAM: 4})
    engine = make_engine(settings)
    init_ledger(engine, settings)
    with engine.connect() as conn:
        KEY.clear()
        KEY.update(answer_keys.exam_key(conn, EXAM))
    yield engine
    engine.dispose()


KEY: dict[str, str] = {}


def _right(question: str) -> str:
    return KEY[question]


def _wrong(question: str) -> str:
    return next(option for option in grading.OPTIONS if option != _right(question))


def _sit(engine: Engine, student: str, correct: int, finish: bool = True) -> str:
    """An attempt answering all four questions, the first ``correct`` of them right."""
    ensure_student(engine, student)
    attempt, _ = start_attempt(engine, student, EXAM, None)
    for n in range(1, 5):
        question = f"q{n}"
        content = _right(question) if n <= correct else _wrong(question)
        submit_revision(engine, RevisionPolicy(), revision_row(attempt.id, question, 1, content, f"{attempt.id}-{question}", "web_1"))
    if finish:
        finish_attempt(engine, attempt.id, "web_1")
    return attempt.id


def _stored(engine: Engine, attempt_id: str) -> int | None:
    with engine.connect() as conn:
        return conn.execute(select(attempts.c.score).where(attempts.c.id == attempt_id)).scalar_one()


def _merit_and_answer_reads(engine: Engine, attempt_id: str) -> tuple[dict, int]:
    reads = []

    def record(_conn, _cursor, statement, *_args) -> None:  # SQLAlchemy's event signature
        if "FROM answers" in statement:
            reads.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        with engine.connect() as conn:
            card = merit_of(conn, attempt_id)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return card, len(reads)


def test_finish_stores_the_score_of_the_answers(engine: Engine) -> None:
    scored = _sit(engine, "s-1", correct=3)
    still_open = _sit(engine, "s-2", correct=4, finish=False)
    assert _stored(engine, scored) == 3
    assert _stored(engine, still_open) is None


def test_a_replayed_finish_keeps_the_stored_score(engine: Engine) -> None:
    attempt = _sit(engine, "s-1", correct=2)
    assert finish_attempt(engine, attempt, "web_2").operation_ids == []
    assert _stored(engine, attempt) == 2


def test_ranking_reads_no_answer_when_every_score_is_stored(engine: Engine) -> None:
    ids = [_sit(engine, f"s-{n}", correct=n) for n in range(1, 5)]
    _sit(engine, "s-open", correct=4, finish=False)
    card, answer_reads = _merit_and_answer_reads(engine, ids[1])
    assert answer_reads == 0
    assert (card["score"], card["position"], card["finished_attempts"]) == (2, 3, 4)
    assert card["ranked_against"] == sorted(ids)


def test_ranking_uses_the_stored_score_not_a_rescore(engine: Engine) -> None:
    """A stored score that disagrees with the answers wins: proof the answers were not re-read."""
    low, high = _sit(engine, "s-1", correct=1), _sit(engine, "s-2", correct=3)
    with engine.begin() as conn:
        conn.execute(update(attempts).where(attempts.c.id == low).values(score=4))
    card, _ = _merit_and_answer_reads(engine, high)
    assert (card["score"], card["position"]) == (3, 2)


def test_an_attempt_without_a_stored_score_is_scored_from_its_answers(engine: Engine) -> None:
    """Negative control of the stored path: a NULL score (an older release's finish) is re-scored."""
    low, high = _sit(engine, "s-1", correct=1), _sit(engine, "s-2", correct=3)
    with engine.begin() as conn:
        conn.execute(update(attempts).where(attempts.c.id == high).values(score=None))
    card, answer_reads = _merit_and_answer_reads(engine, low)
    assert answer_reads == 1
    assert (card["score"], card["position"], card["ranked_against"]) == (1, 2, sorted([low, high]))
