"""An attempt's score and its position among the finished attempts of its exam.

Scores are stored on the attempt by the finish transaction (``stack.ledger.attempts``),
so ranking one attempt reads one narrow row per finished attempt from the
``ix_attempts_rank`` index instead of re-reading and re-scoring every answer of the
exam (which made each merit job O(answers in the ledger)). An attempt without a stored
score (finished by an older release) is scored from its answers here, with the same
``grading.score``, so both paths give the numbers a checker recomputes from the exports.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from stack.ledger import answer_keys, grading
from stack.ledger.schema import answers, attempts, exams

__all__ = ["finished_scores", "merit_of", "score_from_answers"]


def score_from_answers(conn: Connection, exam_code: str, attempt_ids: list[str]) -> dict[str, int]:
    """Score each attempt from its answers in the ledger (0 for one without answers)."""
    contents: dict[str, dict[str, str]] = {attempt_id: {} for attempt_id in attempt_ids}
    if attempt_ids:
        rows = conn.execute(select(answers.c.attempt_id, answers.c.question, answers.c.content)
                            .where(answers.c.attempt_id.in_(attempt_ids)))
        for row in rows:
            contents[row.attempt_id][row.question] = row.content
    key = answer_keys.exam_key(conn, exam_code) if attempt_ids else {}
    return {attempt_id: grading.score(key, given) for attempt_id, given in contents.items()}


def finished_scores(conn: Connection, exam_code: str, attempt_id: str) -> dict[str, int]:
    """{attempt id: score} of every finished attempt of the exam, and of ``attempt_id`` itself."""
    finished = (attempts.c.exam_code == exam_code) & (attempts.c.status == "finished")
    rows = conn.execute(select(attempts.c.id, attempts.c.score).where(finished | (attempts.c.id == attempt_id)))
    stored = {row.id: row.score for row in rows}
    missing = [other for other, value in stored.items() if value is None]
    scores = {other: value for other, value in stored.items() if value is not None}
    scores.update(score_from_answers(conn, exam_code, missing))
    return scores


def merit_of(conn: Connection, attempt_id: str) -> dict[str, Any]:
    """Score and position of an attempt among the finished attempts of its exam.

    ``ranked_against`` names every attempt the position was computed against (its own
    included), so a checker can recompute the position from the exports.
    """
    attempt = conn.execute(select(attempts).where(attempts.c.id == attempt_id)).first()
    if attempt is None:
        raise LookupError(f"no attempt {attempt_id}")
    question_count = conn.execute(select(exams.c.question_count).where(exams.c.code == attempt.exam_code)).scalar_one()
    scores = finished_scores(conn, attempt.exam_code, attempt_id)
    own = scores[attempt_id]
    return {
        "attempt_id": attempt_id,
        "student_id": attempt.student_id,
        "exam_code": attempt.exam_code,
        "score": own,
        "max_score": question_count,
        "position": 1 + sum(1 for other in scores.values() if other > own),
        "ranked_against": sorted(scores),
        "finished_attempts": len(scores),
    }
