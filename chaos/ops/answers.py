"""The history op of an answer, in one place: the chaos workload (chaos/load/exam.py) and the
Locust student (loadtests/ramp_student.py) write it, the answers checker reads it back.

``answer``: ``PUT /v1/attempts/{id}/answers/{q}`` with ``{"content": ...}`` and the op's own
``Idempotency-Key``. The invoke value holds ``attempt_id``, ``question``, ``content`` and
``idempotency_key``; an ``ok`` completion carries the ``receipt_id`` of the reply.
Standard library only: the Locust student runs under gevent and imports it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ANSWER", "ANSWER_FIELDS", "answer_body", "answer_headers", "answer_path", "answer_value"]

ANSWER = "answer"
ANSWER_FIELDS = ("attempt_id", "question", "content", "idempotency_key")
"""What an answer invoke's value holds; an invoke lacking one cannot be judged."""


def answer_value(attempt_id: str, question: str, content: str, key: str) -> dict[str, Any]:
    return {"attempt_id": attempt_id, "question": question, "content": content, "idempotency_key": key}


def answer_path(attempt_id: str, question: str) -> str:
    return f"/v1/attempts/{attempt_id}/answers/{question}"


def answer_body(content: str) -> dict[str, str]:
    return {"content": content}


def answer_headers(auth: dict[str, str], key: str) -> dict[str, str]:
    return {**auth, "Idempotency-Key": key}
