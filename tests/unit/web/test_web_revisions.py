"""Answer revisions: the highest accepted revision is current, every revision is logged,
a late lower one is acknowledged as superseded, finish freezes, merit scores the frozen value."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import Engine, select
from web_support import TestClient, auth, start, token_for

from stack.config import SettingsError, load_settings
from stack.ledger.ranking import merit_of
from stack.ledger.answer_keys import exam_key
from stack.ledger.schema import answer_revisions, answers
from stack.web.app import create_app


def revise(client: TestClient, token: str, attempt: str, question: str, content: str, revision: int,
           key: str | None = None):  # type: ignore[no-untyped-def]
    headers = auth(token) | {"Idempotency-Key": key or uuid.uuid4().hex}
    return client.put(f"/v1/attempts/{attempt}/answers/{question}", json={"content": content, "revision": revision},
                      headers=headers)


def current(client: TestClient, token: str, attempt: str) -> dict[str, tuple[int, str]]:
    reply = client.get(f"/v1/attempts/{attempt}/answers", headers=auth(token))
    assert reply.status_code == 200, reply.text
    return {a["question"]: (a["revision"], a["content"]) for a in reply.json()["answers"]}


def log_rows(ledger: Engine) -> list[tuple[int, str, int]]:
    with ledger.connect() as conn:
        rows = conn.execute(select(answer_revisions).order_by(answer_revisions.c.revision)).all()
    return [(r.revision, r.content, r.superseded) for r in rows]


def test_a_higher_revision_becomes_current_and_every_revision_is_logged(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    first = revise(app_client, token, attempt, "q1", "A", 1)
    second = revise(app_client, token, attempt, "q1", "C", 2)
    assert (first.status_code, second.status_code) == (201, 201)
    assert second.json()["superseded"] is False and second.json()["current_revision"] == 2
    assert current(app_client, token, attempt) == {"q1": (2, "C")}
    assert log_rows(ledger) == [(1, "A", 0), (2, "C", 0)]
    with ledger.connect() as conn:
        assert conn.execute(select(answers.c.receipt_id)).scalar_one() == second.json()["receipt_id"]


def test_a_late_lower_revision_is_acknowledged_as_superseded_and_never_current(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    revise(app_client, token, attempt, "q1", "D", 3)
    late = revise(app_client, token, attempt, "q1", "A", 2)
    assert late.status_code == 201
    assert late.json()["superseded"] is True and late.json()["revision"] == 2 and late.json()["current_revision"] == 3
    assert current(app_client, token, attempt) == {"q1": (3, "D")}
    assert log_rows(ledger) == [(2, "A", 1), (3, "D", 0)]


def test_replays_and_conflicts_under_revisions(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    first = revise(app_client, token, attempt, "q1", "A", 1, key="k1")
    revise(app_client, token, attempt, "q1", "B", 2, key="k2")
    replay = revise(app_client, token, attempt, "q1", "A", 1, key="k1")
    assert replay.status_code == 200 and replay.json()["receipt_id"] == first.json()["receipt_id"]
    assert replay.json()["replayed"] is True and replay.json()["superseded"] is True  # revision 2 is current now
    assert revise(app_client, token, attempt, "q1", "A", 3, key="k1").status_code == 409  # same key, other revision
    taken = revise(app_client, token, attempt, "q1", "Z", 2, key="k3")  # revision 2 already written under k2
    assert taken.status_code == 409 and "revision" in taken.json()["detail"]
    assert len(log_rows(ledger)) == 2


def test_finish_freezes_the_current_revisions_and_merit_scores_them(app_client: TestClient, ledger: Engine) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    with ledger.connect() as conn:
        right = exam_key(conn, "NOVA-101")["q1"]
    wrong = next(option for option in "ABCD" if option != right)
    revise(app_client, token, attempt, "q1", wrong, 1)
    revise(app_client, token, attempt, "q1", right, 3, key="k3")
    revise(app_client, token, attempt, "q1", wrong, 2)  # late and lower: not the answer
    assert app_client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token)).status_code == 202
    assert revise(app_client, token, attempt, "q1", wrong, 4).status_code == 409
    assert revise(app_client, token, attempt, "q2", wrong, 1).status_code == 409
    assert revise(app_client, token, attempt, "q1", right, 3, key="k3").status_code == 200  # a replay, not a write
    assert current(app_client, token, attempt) == {"q1": (3, right)}
    with ledger.connect() as conn:
        assert merit_of(conn, attempt)["score"] == 1


def test_admin_export_holds_the_log_and_the_current_answers(app_client: TestClient, admin_client: TestClient) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    revise(app_client, token, attempt, "q1", "B", 2)
    revise(app_client, token, attempt, "q1", "A", 1)
    headers = {"X-Admin-Token": admin_client.app.state.proctor.settings.admin_token}
    log = admin_client.get("/admin/export/answer_revisions", headers=headers).json()["rows"]
    now = admin_client.get("/admin/export/answers", headers=headers).json()["rows"]
    assert sorted((r["revision"], r["superseded"]) for r in log) == [(1, True), (2, False)]
    assert [(r["revision"], r["content"]) for r in now] == [(2, "B")]


@pytest.mark.negative_control
def test_last_arrival_control_lets_a_late_lower_revision_overwrite(settings, ledger, dispatcher) -> None:  # type: ignore[no-untyped-def]
    with TestClient(create_app(settings.with_overrides(answer_revisions="last-arrival"), dispatcher=dispatcher)) as client:
        token = token_for(client)
        attempt = start(client, token)
        revise(client, token, attempt, "q1", "D", 3)
        late = revise(client, token, attempt, "q1", "A", 2)
        assert late.json()["superseded"] is False
        assert current(client, token, attempt) == {"q1": (2, "A")}  # the lost update


@pytest.mark.negative_control
def test_compacting_control_drops_acknowledged_revisions_from_the_log(settings, ledger, dispatcher) -> None:  # type: ignore[no-untyped-def]
    with TestClient(create_app(settings.with_overrides(answer_revisions="compacting"), dispatcher=dispatcher)) as client:
        token = token_for(client)
        attempt = start(client, token)
        assert revise(client, token, attempt, "q1", "A", 1).status_code == 201
        assert revise(client, token, attempt, "q1", "B", 2).status_code == 201
        assert log_rows(ledger) == [(2, "B", 0)]  # revision 1 was acknowledged, then vanished


def test_a_bad_revision_rule_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="PROCTOR_ANSWER_REVISIONS"):
        load_settings({"PROCTOR_ANSWER_REVISIONS": "newest"})
    assert load_settings({"PROCTOR_ANSWER_REVISIONS": "last-arrival"}).controls.answer_revisions == "last-arrival"


def test_a_revision_below_one_is_422_naming_the_field(app_client: TestClient) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    reply = revise(app_client, token, attempt, "q1", "A", 0)
    assert reply.status_code == 422 and "revision" in reply.text
