"""Answer acceptance: committed before the reply, idempotent by key, never half-written."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import Engine, select
from web_support import TestClient, answer, auth, count_rows, start, token_for

from stack.config import Settings
from stack.ledger.revisions import AnswerRejected, RevisionPolicy, revision_row, submit_revision
from stack.ledger.schema import answer_revisions, answers


def test_first_submit_is_201_and_committed_with_node(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    response = answer(app_client, token, attempt, "q1", "B", key="k1")
    assert response.status_code == 201
    body = response.json()
    assert body["attempt_id"] == attempt and body["question"] == "q1" and body["replayed"] is False
    assert response.headers["X-Proctor-Node"] == "web_test"
    with ledger.connect() as conn:
        row = conn.execute(select(answers)).one()
    assert (row.receipt_id, row.content, row.idempotency_key, row.node) == (body["receipt_id"], "B", "k1", "web_test")


def test_replay_same_key_same_body_is_200_with_same_receipt(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    first = answer(app_client, token, attempt, "q1", "B", key="k1")
    again = answer(app_client, token, attempt, "q1", "B", key="k1")
    assert again.status_code == 200
    assert again.json()["receipt_id"] == first.json()["receipt_id"] and again.json()["replayed"] is True
    assert count_rows(ledger, answers) == 1


def test_same_key_other_body_is_409_and_keeps_the_first(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    answer(app_client, token, attempt, "q1", "B", key="k1")
    response = answer(app_client, token, attempt, "q1", "C", key="k1")
    assert response.status_code == 409
    assert "different body" in response.json()["detail"]
    with ledger.connect() as conn:
        assert conn.execute(select(answers.c.content)).scalars().all() == ["B"]


def test_other_key_for_an_answered_question_is_409(app_client: TestClient) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    answer(app_client, token, attempt, "q1", "B", key="k1")
    assert answer(app_client, token, attempt, "q1", "B", key="k2").status_code == 409


def test_one_key_for_two_questions_is_409(app_client: TestClient) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    answer(app_client, token, attempt, "q1", "B", key="k1")
    assert answer(app_client, token, attempt, "q2", "B", key="k1").status_code == 409


def test_answers_after_finish_are_409_but_a_replay_is_still_its_receipt(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    first = answer(app_client, token, attempt, "q1", "B", key="k1")
    assert app_client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token)).status_code == 202
    late = answer(app_client, token, attempt, "q2", "A", key="k2")
    assert late.status_code == 409 and late.json()["detail"] == "attempt is finished"
    replay = answer(app_client, token, attempt, "q1", "B", key="k1")
    assert replay.status_code == 200 and replay.json()["receipt_id"] == first.json()["receipt_id"]
    assert count_rows(ledger, answers) == 1


def test_unknown_questions_are_404(app_client: TestClient) -> None:
    token = token_for(app_client)  # NOVA-101 has 3 questions in the test settings
    attempt = start(app_client, token)
    for question in ("q0", "q4", "q01", "Q1", "x", "q1x"):
        assert answer(app_client, token, attempt, question, "B").status_code == 404, question
    assert answer(app_client, token, attempt, "q3", "B").status_code == 201


def test_unknown_attempt_is_404(app_client: TestClient) -> None:
    token = token_for(app_client)
    assert answer(app_client, token, "no-such-attempt", "q1", "B").status_code == 404


def test_malformed_bodies_are_422_naming_the_field(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    url = f"/v1/attempts/{attempt}/answers/q1"
    headers = auth(token) | {"Idempotency-Key": "k1"}
    cases = {
        "missing content": (headers, {"json": {}}, ["body", "content"]),
        "content not a string": (headers, {"json": {"content": 3}}, ["body", "content"]),
        "no key": (auth(token), {"json": {"content": "B"}}, ["header", "Idempotency-Key"]),
        "empty key": (auth(token) | {"Idempotency-Key": ""}, {"json": {"content": "B"}}, ["header", "Idempotency-Key"]),
    }
    for name, (hdrs, kwargs, loc) in cases.items():
        response = app_client.put(url, headers=hdrs, **kwargs)
        assert response.status_code == 422, name
        detail = response.json()["detail"]
        assert [e["loc"] for e in detail] == [loc], name
        assert "input" not in detail[0], "422 must not echo answers back"
    bad_json = app_client.put(url, headers=headers | {"Content-Type": "application/json"}, content=b"{not json")
    assert bad_json.status_code == 422 and bad_json.json()["detail"][0]["loc"][0] == "body"
    assert count_rows(ledger, answers) == 0


def test_bodies_over_the_limit_are_413_by_header_and_by_actual_size(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    url = f"/v1/attempts/{attempt}/answers/q1"
    headers = auth(token) | {"Idempotency-Key": "k1"}
    declared = app_client.put(url, headers=headers, json={"content": "x" * 2000})
    assert declared.status_code == 413 and declared.headers["X-Proctor-Node"] == "web_test"

    def chunks():  # no Content-Length: only counting the body catches it
        yield b'{"content": "'
        for _ in range(20):
            yield b"x" * 100
        yield b'"}'

    chunked = app_client.put(url, headers=headers | {"Content-Type": "application/json"}, content=chunks())
    assert chunked.status_code == 413
    assert count_rows(ledger, answers) == 0
    assert answer(app_client, token, attempt, "q1", "x" * 500, key="k1").status_code == 201


def test_concurrent_submits_of_one_key_over_http_make_one_row(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    barrier = threading.Barrier(8)

    def submit(_: int):  # type: ignore[no-untyped-def]
        barrier.wait()
        return answer(app_client, token, attempt, "q1", "B", key="same")

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(submit, range(8)))
    statuses = sorted(r.status_code for r in results)
    assert statuses == [200] * 7 + [201]
    assert len({r.json()["receipt_id"] for r in results}) == 1
    assert count_rows(ledger, answers) == 1


def test_concurrent_submits_in_the_ledger_make_one_row(app_client: TestClient, ledger: Engine) -> None:
    """Straight at the ledger, separate engines (as separate nodes would have)."""
    token = token_for(app_client)
    attempt = start(app_client, token)
    barrier = threading.Barrier(6)

    def submit(i: int) -> str:
        barrier.wait()
        try:
            return submit_revision(ledger, RevisionPolicy(),
                                   revision_row(attempt, "q2", 1, "C" if i % 2 else "D", "k", f"node{i}")).receipt_id
        except AnswerRejected as exc:
            return exc.reason

    with ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(submit, range(6)))
    assert count_rows(ledger, answers) == 1 and count_rows(ledger, answer_revisions) == 1
    receipts = [o for o in outcomes if o != AnswerRejected.KEY_OTHER_BODY]
    assert len(set(receipts)) == 1  # the winner plus its same-body replays share one receipt
    assert len(receipts) == 3  # the three writers of the winner's content: the others' body differs


def test_answers_are_accepted_while_valkey_is_down(settings: Settings, ledger: Engine) -> None:
    """The real dispatcher, pointed at a closed port: accept never touches Valkey."""
    from stack.web.app import create_app

    with TestClient(create_app(settings)) as client:
        token = token_for(client)
        attempt = start(client, token)
        assert answer(client, token, attempt, "q1", "B").status_code == 201


def test_losing_an_insert_race_rereads_and_classifies(app_client: TestClient, ledger: Engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """What PostgreSQL does under READ COMMITTED (SQLite's BEGIN IMMEDIATE never lets it
    happen): our insert hits the unique constraint because a concurrent submit committed
    after our read. The retry must re-read and answer as a replay or a conflict."""
    from sqlalchemy.exc import IntegrityError

    import stack.ledger.revisions as module

    token = token_for(app_client)
    attempt = start(app_client, token)
    winner = module.submit_revision(ledger, module.RevisionPolicy(), module.revision_row(attempt, "q1", 1, "B", "k", "other-node"))
    real, calls = module.submit_in, []

    def lose_once(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:
            raise IntegrityError("INSERT INTO answers", {}, Exception("UNIQUE constraint failed"))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "submit_in", lose_once)
    replay = answer(app_client, token, attempt, "q1", "B", key="k")
    assert replay.status_code == 200 and replay.json()["receipt_id"] == winner.receipt_id
    calls.clear()
    assert answer(app_client, token, attempt, "q1", "C", key="k").status_code == 409
    assert count_rows(ledger, answers) == 1


class ManualClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_write_behind_acknowledges_before_the_ledger_has_it(settings, ledger, dispatcher) -> None:
    """The negative-control mode really is ack-before-commit: 201 first, the row only once
    the delay has passed. The sink's clock is held still, so no scheduling can reorder it."""
    from stack.web.app import create_app

    current = settings.with_overrides(answer_write_behind=0.3)
    with TestClient(create_app(current, dispatcher=dispatcher)) as client:
        sink = client.app.state.proctor.answers
        sink.clock = clock = ManualClock()
        token = token_for(client)
        attempt = start(client, token)
        reply = answer(client, token, attempt, "q1", "A")
        assert reply.status_code == 201
        clock.now += 0.29
        looked = sink.passes
        sink.wait_for(lambda: sink.passes > looked + 1)  # a whole writer pass began after the ack
        assert count_rows(ledger, answers) == 0 and sink.handled == 0  # acknowledged, not durable
        clock.now += 0.02
        sink.wait_for(lambda: sink.handled == 1)  # the writer committed it (pytest-timeout guards a hang)
        assert count_rows(ledger, answers) == 1
