"""The answer key and the score: the one place either is computed.

The key is secret: drawn per exam from ``secrets`` (``draw_key``) when the exam is
provisioned and kept in the ledger (stack/ledger/answer_keys.py). It used to be
``sha256("<exam>:qN")``, which anyone holding the source could print (a key computed
offline scored 20/20). Only scoring and the admin ``exams`` export read it, so a checker
still re-scores every attempt from the exports alone. Standard library only: the Locust
student imports ``OPTIONS`` under gevent, and the export path of a web node must not pull
in RQ or HTTP.
"""

from __future__ import annotations

import secrets
from typing import Mapping

__all__ = ["OPTIONS", "draw_key", "score"]

OPTIONS = "ABCD"
"""Every question is multiple choice."""


def draw_key(question_count: int) -> dict[str, str]:
    """A fresh key, ``q1`` … ``qN``, each option from the OS's CSPRNG."""
    return {f"q{n}": secrets.choice(OPTIONS) for n in range(1, question_count + 1)}


def score(key: Mapping[str, str], contents: Mapping[str, str]) -> int:
    """Answers (question -> content) that match the key, ignoring case and surrounding blanks."""
    return sum(1 for question, content in contents.items() if content.strip().upper() == key.get(question))
