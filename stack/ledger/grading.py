"""The answer key and the score: the one place either is computed.

The merit job scores with it and the ``exams`` export publishes it, so a checker
can re-score every attempt from the exports alone. It imports nothing but hashlib:
the export path of a web node must not pull in RQ or the job module's HTTP client.
"""

from __future__ import annotations

import hashlib
from typing import Mapping

__all__ = ["OPTIONS", "answer_key", "answer_keys", "score"]

OPTIONS = "ABCD"
"""Every question is multiple choice; the key is derived, so no fixture table is needed."""


def answer_key(exam_code: str, question: str) -> str:
    """The correct option of a question: a stable hash, the same in every process."""
    digest = hashlib.sha256(f"{exam_code}:{question}".encode()).digest()
    return OPTIONS[digest[0] % len(OPTIONS)]


def answer_keys(exam_code: str, question_count: int) -> dict[str, str]:
    """The key of a whole exam, ``q1`` … ``qN``."""
    return {f"q{n}": answer_key(exam_code, f"q{n}") for n in range(1, question_count + 1)}


def score(exam_code: str, contents: Mapping[str, str]) -> int:
    """Answers (question -> content) that match the key, ignoring case and surrounding blanks."""
    return sum(1 for question, content in contents.items() if content.strip().upper() == answer_key(exam_code, question))
