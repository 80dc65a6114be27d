"""Sessions, attempt start, finish (one transaction + best-effort dispatch), ownership."""

from __future__ import annotations

import json
import time

from sqlalchemy import Engine, select
from web_support import (
    ROSTER,
    RecordingDispatcher,
    TestClient,
    answer,
    auth,
    count_rows,
    start,
    token_for,
)

from stack.config import Settings
from stack.ledger.attempts import finish_attempt
from stack.ledger.schema import attempts, audit_log, outbox, students
from stack.web.app import create_app
from stack.web.auth import issue_token


def _login(client: TestClient, student: str, exam: str, code: str):  # type: ignore[no-untyped-def]
    return client.post("/v1/sessions", json={"student_id": student, "exam_code": exam, "access_code": code})


def test_session_needs_the_roster_code_and_returns_a_token(app_client: TestClient, ledger: Engine) -> None:
    response = _login(app_client, "s-9", "NOVA-102", ROSTER["NOVA-102"]["s-9"])
    assert response.status_code == 201
    body = response.json()
    assert (body["student_id"], body["exam_code"]) == ("s-9", "NOVA-102")
    assert body["expires_at"] > time.time() and body["token"]
    assert _login(app_client, "s-9", "NOVA-101", ROSTER["NOVA-101"]["s-9"]).status_code == 201
    # A code is per exam: the NOVA-102 code does not open NOVA-101.
    assert _login(app_client, "s-9", "NOVA-101", ROSTER["NOVA-102"]["s-9"]).status_code == 401
    assert count_rows(ledger, students) == len(ROSTER["NOVA-101"])  # enrolled by the roster, not by login


def test_session_errors(app_client: TestClient, ledger: Engine) -> None:
    unknown = _login(app_client, "s-1", "NOPE", ROSTER["NOVA-101"]["s-1"])
    assert unknown.status_code == 401
    missing = app_client.post("/v1/sessions", json={"student_id": "s-1", "access_code": "x"})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "exam_code"]
    empty = app_client.post("/v1/sessions", json={"student_id": "", "exam_code": "NOVA-101", "access_code": "x"})
    assert empty.status_code == 422 and empty.json()["detail"][0]["loc"] == ["body", "student_id"]
    no_code = app_client.post("/v1/sessions", json={"student_id": "s-1", "exam_code": "NOVA-101"})
    assert no_code.status_code == 422 and no_code.json()["detail"][0]["loc"] == ["body", "access_code"]


def test_start_attempt_and_replay_by_key(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    first = app_client.post("/v1/attempts", headers=auth(token) | {"Idempotency-Key": "start-1"})
    assert first.status_code == 201
    body = first.json()
    assert body["exam_code"] == "NOVA-101" and body["question_count"] == 3 and body["status"] == "open"
    assert body["links"]["finish"] == f"/v1/attempts/{body['attempt_id']}/finish"
    again = app_client.post("/v1/attempts", headers=auth(token) | {"Idempotency-Key": "start-1"})
    assert again.status_code == 200 and again.json()["attempt_id"] == body["attempt_id"]
    other = app_client.post("/v1/attempts", headers=auth(token))
    assert other.status_code == 201 and other.json()["attempt_id"] != body["attempt_id"]
    assert count_rows(ledger, attempts) == 2


def test_start_key_reused_for_another_exam_is_409(app_client: TestClient) -> None:
    start(app_client, token_for(app_client, "s-1", "NOVA-101"), key="k")
    response = app_client.post("/v1/attempts", headers=auth(token_for(app_client, "s-1", "NOVA-102")) | {"Idempotency-Key": "k"})
    assert response.status_code == 409


def test_finish_writes_attempt_outbox_and_audit_together(
    app_client: TestClient, ledger: Engine, dispatcher: RecordingDispatcher
) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    answer(app_client, token, attempt, "q1", "B")
    response = app_client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token))
    assert response.status_code == 202
    assert response.json()["links"] == {
        "merit_card": f"/v1/attempts/{attempt}/merit-card",
        "narrative": f"/v1/attempts/{attempt}/narrative",
    }
    with ledger.connect() as conn:
        rows = conn.execute(select(outbox.c.operation_id, outbox.c.status, outbox.c.attempts)).all()
        status = conn.execute(select(attempts.c.status).where(attempts.c.id == attempt)).scalar_one()
        audits = conn.execute(select(audit_log.c.action, audit_log.c.detail)).all()
    assert sorted(rows) == sorted((f"{k}-{attempt}", "pending", 0) for k in ("merit", "narrative", "sms"))
    assert status == "finished"
    assert [a.action for a in audits] == ["attempt.finish"] and json.loads(audits[0].detail)["node"] == "web_test"
    assert dispatcher.submitted == [attempt]

    replay = app_client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token))
    assert replay.status_code == 202 and replay.json()["replayed"] is True
    assert count_rows(ledger, outbox) == 3 and count_rows(ledger, audit_log) == 1


def test_finish_rolls_back_whole_when_the_outbox_insert_fails(app_client: TestClient, ledger: Engine) -> None:
    """Nothing half-written: a clashing outbox row aborts the attempt's status change too."""
    token = token_for(app_client)
    attempt = start(app_client, token)
    now = time.time()
    with ledger.begin() as conn:  # a stray row for the same (attempt, kind) makes create_rows fail
        conn.execute(outbox.insert().values(operation_id=f"merit-{attempt}", attempt_id=attempt, kind="merit",
                                            status="done", attempts=1, created_at=now, updated_at=now))
    response = app_client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token))
    assert response.status_code == 500 and response.headers["X-Proctor-Node"] == "web_test"
    with ledger.connect() as conn:
        assert conn.execute(select(attempts.c.status).where(attempts.c.id == attempt)).scalar_one() == "open"
    assert count_rows(ledger, outbox) == 1 and count_rows(ledger, audit_log) == 0


def test_concurrent_finishes_write_one_set_of_rows(app_client: TestClient, ledger: Engine) -> None:
    from concurrent.futures import ThreadPoolExecutor

    attempt = start(app_client, token_for(app_client))
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: finish_attempt(ledger, attempt, "n"), range(4)))
    assert sorted(len(r.operation_ids) for r in results) == [0, 0, 0, 3]
    assert count_rows(ledger, outbox) == 3


def test_finish_with_valkey_down_is_202_and_leaves_rows_pending(settings: Settings, ledger: Engine) -> None:
    app = create_app(settings)  # the real dispatcher, pointed at a closed port
    with TestClient(app) as client:
        token = token_for(client)
        attempt = start(client, token)
        assert client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token)).status_code == 202
        assert app.state.proctor.dispatcher.wait_idle(10)
    with ledger.connect() as conn:
        assert set(conn.execute(select(outbox.c.status)).scalars()) == {"pending"}


def test_a_student_touches_only_their_own_attempts(app_client: TestClient, ledger: Engine) -> None:
    mine = token_for(app_client, "s-1")
    theirs = token_for(app_client, "s-2")
    attempt = start(app_client, mine)
    base = f"/v1/attempts/{attempt}"
    assert answer(app_client, theirs, attempt, "q1", "B").status_code == 404
    assert app_client.post(f"{base}/finish", headers=auth(theirs)).status_code == 404
    assert app_client.get(f"{base}/merit-card", headers=auth(theirs)).status_code == 404
    assert app_client.get(f"{base}/narrative", headers=auth(theirs)).status_code == 404
    assert count_rows(ledger, outbox) == 0
    assert app_client.post("/v1/attempts/nope/finish", headers=auth(mine)).status_code == 404


def test_401_for_missing_bad_and_expired_tokens(app_client: TestClient, settings: Settings) -> None:
    attempt = start(app_client, token_for(app_client))
    expired, _ = issue_token(settings.token_secret, "s-1", "NOVA-101", ttl=10, now=time.time() - 60)
    forged, _ = issue_token("another-secret", "s-1", "NOVA-101", ttl=60)
    good = token_for(app_client)
    tampered = good[:-2] + ("AA" if not good.endswith("AA") else "BB")
    for headers in ({}, {"Authorization": "Basic abc"}, auth("garbage"), auth(expired), auth(forged), auth(tampered)):
        response = app_client.post(f"/v1/attempts/{attempt}/finish", headers=headers)
        assert response.status_code == 401, headers
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert app_client.post("/v1/attempts", headers=headers).status_code == 401


def test_every_response_names_the_node(app_client: TestClient) -> None:
    for response in (
        app_client.get("/healthz"),
        app_client.get("/nope"),
        app_client.post("/v1/sessions", json={}),
        app_client.post("/v1/attempts"),
    ):
        assert response.headers["X-Proctor-Node"] == "web_test"
