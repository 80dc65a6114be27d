"""Round two, finding 7: the exam's rules were not enforced.

With the window set (as the admin API does) to have closed an hour earlier, start, answer
and finish still returned 201 / 201 / 202; a student could start unlimited attempts (four
20/20 attempts pushed a victim from position 1 to 5 of 5). Now the window and the attempts
per student (default 1) are the server's rules (stack/ledger/exam_rules.py).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest
from r2_node import EXAM, Node, node_settings, running_node
from sqlalchemy import func, select, text
from web_support import auth

from stack.ledger import attempts as ledger_attempts
from stack.ledger.attempts import ensure_student, start_attempt
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.exam_lock import ExamWindow, set_window
from stack.ledger.schema import attempts

HOUR = 3600.0


def _set_window(node: Node, opens_at: float, closes_at: float) -> None:
    """What PUT /admin/exams/{code}/window writes (that route needs the capacity lock's Valkey)."""
    with node.engine.begin() as conn:
        set_window(conn, ExamWindow(EXAM, opens_at, closes_at, min_web=1))
    rules = getattr(node.client.app.state.proctor, "rules", None)  # type: ignore[attr-defined]
    if rules is not None:  # (the parent commit, where this test must fail, has no rules to forget)
        rules.forget()  # as the route does


def _answer(node: Node, token: str, attempt: str, key: str):  # type: ignore[no-untyped-def]
    return node.client.put(f"/v1/attempts/{attempt}/answers/q1", json={"content": "A"},
                           headers=auth(token) | {"Idempotency-Key": key})


def test_after_the_close_start_and_answer_are_refused_and_finish_only_within_grace(tmp_path: Path) -> None:
    with running_node(tmp_path) as node:  # the default grace: 300 s
        token, late = node.token("r2-01"), node.token("r2-02")
        attempt = node.client.post("/v1/attempts", headers=auth(token)).json()["attempt_id"]
        assert _answer(node, token, attempt, "k1").status_code == 201  # open: valid ops first
        now = time.time()
        _set_window(node, now - 2 * HOUR, now - 60)  # closed a minute ago: within the grace period
        started = node.client.post("/v1/attempts", headers=auth(late))
        assert started.status_code == 409 and "closed at" in started.json()["detail"]
        answered = _answer(node, token, attempt, "k2")
        assert answered.status_code == 409 and "closed at" in answered.json()["detail"]
        assert node.client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token)).status_code == 202


def test_after_the_grace_period_an_open_attempt_cannot_finish(tmp_path: Path) -> None:
    with running_node(tmp_path) as node:  # the default grace: 300 s
        token = node.token("r2-01")
        attempt = node.client.post("/v1/attempts", headers=auth(token)).json()["attempt_id"]
        now = time.time()
        _set_window(node, now - 2 * HOUR, now - HOUR)  # the finding's window: closed an hour ago
        finished = node.client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token))
        assert finished.status_code == 409 and "grace period" in finished.json()["detail"]


def test_before_the_window_opens_nothing_starts(tmp_path: Path) -> None:
    with running_node(tmp_path) as node:
        token = node.token("r2-01")
        now = time.time()
        _set_window(node, now + HOUR, now + 2 * HOUR)
        early = node.client.post("/v1/attempts", headers=auth(token))
        assert early.status_code == 409 and "opens at" in early.json()["detail"]


def test_a_student_gets_one_attempt_by_default(tmp_path: Path) -> None:
    with running_node(tmp_path) as node:
        token = node.token("r2-01")
        first = node.client.post("/v1/attempts", headers=auth(token) | {"Idempotency-Key": "start-1"})
        assert first.status_code == 201
        replay = node.client.post("/v1/attempts", headers=auth(token) | {"Idempotency-Key": "start-1"})
        assert replay.status_code == 200 and replay.json()["attempt_id"] == first.json()["attempt_id"]  # not a new one
        second = node.client.post("/v1/attempts", headers=auth(token))
        assert second.status_code == 409 and "allows 1 attempt" in second.json()["detail"]
        # Another student is not affected by this one's limit.
        assert node.client.post("/v1/attempts", headers=auth(node.token("r2-02"))).status_code == 201


def test_an_exam_policy_may_allow_repeats(tmp_path: Path) -> None:
    with running_node(tmp_path, max_attempts=3) as node:
        token = node.token("r2-01")
        statuses = [node.client.post("/v1/attempts", headers=auth(token)).status_code for _ in range(4)]
        assert statuses == [201, 201, 201, 409]


def test_racing_starts_of_one_student_take_one_attempt_on_sqlite(tmp_path: Path) -> None:
    with running_node(tmp_path) as node:
        token = node.token("r2-01")
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: node.client.post("/v1/attempts", headers=auth(token)).status_code,
                                     range(16)))
        print(f"\n16 racing starts: {statuses.count(201)} x 201, {statuses.count(409)} x 409")
        assert sorted(statuses) == [201] + [409] * 15
        with node.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(attempts)).scalar_one() == 1


def test_an_exam_without_a_window_or_policy_is_closed(tmp_path: Path) -> None:
    engine = make_engine(node_settings(tmp_path))
    init_ledger(engine, node_settings(tmp_path))
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM exam_policies"))  # an exam that was never provisioned
    ensure_student(engine, "r2-01")
    with pytest.raises(ledger_attempts.ExamRuleRefused, match="no window"):
        start_attempt(engine, "r2-01", EXAM, None)
    engine.dispose()


# ------------------------------------------------------------------ PostgreSQL: the race forced


@pytest.fixture(scope="module")
def postgres() -> Iterator[object]:
    from stack.embedded.postgres import PostgresServer

    with PostgresServer() as server:
        yield server


def _race_two_starts(tmp_path: Path, server: object, monkeypatch: pytest.MonkeyPatch, drop_key: bool) -> int:
    """Two starts of one student that have both counted 0 used slots before either inserts:
    the race the attempt limit must survive under read committed. Returns attempts created."""
    from stack.ledger import exam_rules
    from stack.ledger.exam_rules import ExamRuleRefused
    settings = node_settings(tmp_path, database_url=server.url)  # type: ignore[attr-defined]
    engine = make_engine(settings)
    with engine.begin() as conn:  # a clean schema per test: the module shares one cluster
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    init_ledger(engine, settings)
    if drop_key:  # the negative control: the slot is no longer a key
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE attempt_slots DROP CONSTRAINT attempt_slots_pkey"))
    ensure_student(engine, "r2-01")
    both_counted = threading.Barrier(2, timeout=30)
    real_next_slot = exam_rules.next_slot
    raced = threading.local()

    def next_slot_after_both_counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        slot = real_next_slot(*args, **kwargs)
        if not getattr(raced, "done", False):  # the first try of each thread waits for the other
            raced.done = True
            both_counted.wait()
        return slot

    monkeypatch.setattr(exam_rules, "next_slot", next_slot_after_both_counted)

    def start(_: int) -> str:
        try:
            start_attempt(engine, "r2-01", EXAM, None)
            return "created"
        except ExamRuleRefused:
            return "refused"

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(start, range(2)))
    with engine.connect() as conn:
        created = int(conn.execute(select(func.count()).select_from(attempts)).scalar_one())
    engine.dispose()
    print(f"\nforced race on PostgreSQL (slot key {'dropped' if drop_key else 'kept'}): {outcomes}")
    return created


@pytest.mark.integration
def test_two_racing_starts_take_one_attempt_on_postgresql(tmp_path: Path, postgres: object,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert _race_two_starts(tmp_path, postgres, monkeypatch, drop_key=False) == 1


@pytest.mark.integration
def test_negative_control_without_the_slot_key_the_race_takes_two(tmp_path: Path, postgres: object,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert _race_two_starts(tmp_path, postgres, monkeypatch, drop_key=True) == 2
