"""The exam roster: who may sit which exam, and how a student proves it.

The exam office issues each student a random access code (128 bits from ``secrets``).
The ledger stores only ``HMAC-SHA256(roster_key, code)``; the key is random per run and
lives in the 0600 manifest, never in the ledger. A fast keyed hash is enough because
the codes are random, not chosen by people: there is no dictionary to try, so a slow
KDF would add nothing but CPU (10,000 students, 20 logins/s). Without the key a stolen
ledger gives nothing to try offline; with it, 2^128 guesses are still out of reach.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Iterable

from sqlalchemy import Connection, Engine, select

from stack.ledger.schema import roster, students

__all__ = ["CODE_BYTES", "code_hmac", "issue_roster", "new_access_code", "verify_access_code"]

CODE_BYTES = 16
"""128 bits of entropy per access code."""

_DUMMY_HMAC = "0" * 64


def new_access_code() -> str:
    return secrets.token_urlsafe(CODE_BYTES)


def code_hmac(key: str, code: str) -> str:
    # surrogatepass: a hostile code can hold lone surrogates; it must still hash (and fail).
    return hmac.new(key.encode("utf-8"), code.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def issue_roster(engine: Engine, key: str, exam_code: str, student_ids: Iterable[str], now: float | None = None) -> dict[str, str]:
    """Enrol the students in the exam with fresh codes; returns {student_id: code} (the only copy)."""
    now = time.time() if now is None else now
    codes = {student_id: new_access_code() for student_id in student_ids}
    with engine.begin() as conn:
        known = set(conn.execute(select(students.c.id).where(students.c.id.in_(list(codes)))).scalars())
        fresh = [{"id": sid, "created_at": now} for sid in codes if sid not in known]
        if fresh:
            conn.execute(students.insert(), fresh)
        conn.execute(roster.delete().where(roster.c.exam_code == exam_code, roster.c.student_id.in_(list(codes))))
        conn.execute(roster.insert(), [
            {"exam_code": exam_code, "student_id": sid, "code_hmac": code_hmac(key, code)} for sid, code in codes.items()
        ])
    return codes


def verify_access_code(conn: Connection, key: str, exam_code: str, student_id: str, code: str) -> bool:
    """True only for an enrolled student with the right code. An unknown student costs the
    same HMAC and comparison as a wrong code, so timing does not tell the two apart."""
    stored = conn.execute(
        select(roster.c.code_hmac).where(roster.c.exam_code == exam_code, roster.c.student_id == student_id)
    ).scalar_one_or_none()
    offered = code_hmac(key, code)
    matched = hmac.compare_digest(offered, stored if stored is not None else _DUMMY_HMAC)
    return matched and stored is not None
