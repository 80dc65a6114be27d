"""Round two, finding 2: the answer key could be computed from the source.

The attacker read ``stack/ledger/grading.py`` (``sha256("NOVA-101:qN")``), printed the key
offline, answered with it and scored 20/20. Now the key is drawn per exam from ``secrets``
at provisioning and read only through the admin export.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from r2_node import EXAM, QUESTIONS, running_node
from sqlalchemy import select
from web_support import ADMIN, auth

from stack.ledger.schema import attempts


def _key_from_the_source(question: str) -> str:
    """What anyone holding the repository could compute before this issue."""
    return "ABCD"[hashlib.sha256(f"{EXAM}:{question}".encode()).digest()[0] % 4]


def test_a_key_printed_from_the_source_does_not_score(tmp_path: Path) -> None:
    with running_node(tmp_path) as node:
        token = node.token("r2-01")
        attempt = node.client.post("/v1/attempts", headers=auth(token)).json()["attempt_id"]
        for n in range(1, QUESTIONS + 1):
            put = node.client.put(f"/v1/attempts/{attempt}/answers/q{n}", json={"content": _key_from_the_source(f"q{n}")},
                                  headers=auth(token) | {"Idempotency-Key": f"k{n}"})
            assert put.status_code == 201
        assert node.client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token)).status_code == 202
        with node.engine.connect() as conn:
            score = conn.execute(select(attempts.c.score).where(attempts.c.id == attempt)).scalar_one()
        print(f"\nscore with the key computed from the source: {score}/{QUESTIONS}")
        # A random key matches the derived one on all 20 questions with odds 4^-20.
        assert score < QUESTIONS
        # The real key is in the admin export (and only there): with it the same attacker would
        # have scored 20, so the score above is the key's doing, not a broken scorer.
        exported = node.admin.get("/admin/export/exams", headers={"X-Admin-Token": ADMIN}).json()["rows"]
        key = next(row["answer_key"] for row in exported if row["exam_code"] == EXAM)
        matches = sum(1 for n in range(1, QUESTIONS + 1) if key[f"q{n}"] == _key_from_the_source(f"q{n}"))
        assert score == matches


def test_each_ledger_draws_its_own_key(tmp_path: Path) -> None:
    keys = []
    for run in ("one", "two"):
        with running_node(tmp_path / run) as node:
            rows = node.admin.get("/admin/export/exams", headers={"X-Admin-Token": ADMIN}).json()["rows"]
            keys.append(rows[0]["answer_key"])
    assert sorted(keys[0]) == sorted(keys[1]) and len(keys[0]) == QUESTIONS
    assert keys[0] != keys[1]  # equal with odds 4^-20


def test_no_public_route_serves_the_key(tmp_path: Path) -> None:
    with running_node(tmp_path) as node:
        assert node.client.get("/admin/export/exams", headers={"X-Admin-Token": ADMIN}).status_code == 404
        assert node.admin.get("/admin/export/exams").status_code == 403  # the admin listener wants the token
