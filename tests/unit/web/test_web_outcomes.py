"""Merit card and narrative: honest statuses; a placeholder is always labelled one."""

from __future__ import annotations

import json
import time

from sqlalchemy import Engine, update
from web_support import TestClient, auth, start, token_for

from stack.ledger.schema import outbox, outcomes
from stack.web.routes.outcomes import NARRATIVE_PLACEHOLDER


def _finished(client: TestClient) -> tuple[str, str]:
    token = token_for(client)
    attempt = start(client, token)
    assert client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token)).status_code == 202
    return token, attempt


def _outcome(engine: Engine, attempt: str, kind: str, status: str, payload: dict) -> None:
    with engine.begin() as conn:
        conn.execute(outcomes.insert().values(operation_id=f"{kind}-{attempt}", attempt_id=attempt, kind=kind,
                                              status=status, payload=json.dumps(payload), created_at=time.time()))


def test_pending_until_an_outcome_exists(app_client: TestClient) -> None:
    token, attempt = _finished(app_client)
    card = app_client.get(f"/v1/attempts/{attempt}/merit-card", headers=auth(token)).json()
    assert card["status"] == "pending" and card["merit_card"] is None and card["outbox_status"] == "pending"
    story = app_client.get(f"/v1/attempts/{attempt}/narrative", headers=auth(token)).json()
    assert story["status"] == "pending" and story["placeholder"] is True and story["text"] == NARRATIVE_PLACEHOLDER
    assert story["narrative"] is None


def test_ready_outcomes_are_served(app_client: TestClient, ledger: Engine) -> None:
    token, attempt = _finished(app_client)
    _outcome(ledger, attempt, "merit", "ready", {"score": 2, "position": 1})
    _outcome(ledger, attempt, "narrative", "ready", {"text": "Well done."})
    card = app_client.get(f"/v1/attempts/{attempt}/merit-card", headers=auth(token)).json()
    assert card["status"] == "ready" and card["merit_card"] == {"score": 2, "position": 1}
    story = app_client.get(f"/v1/attempts/{attempt}/narrative", headers=auth(token)).json()
    assert (story["status"], story["placeholder"], story["text"]) == ("ready", False, "Well done.")


def test_failed_for_review_is_reported_as_such(app_client: TestClient, ledger: Engine) -> None:
    token, attempt = _finished(app_client)
    _outcome(ledger, attempt, "narrative", "failed_for_review", {"reason": "max attempts"})
    story = app_client.get(f"/v1/attempts/{attempt}/narrative", headers=auth(token)).json()
    assert story["status"] == "failed_for_review" and story["placeholder"] is True
    # A failed outbox row without its outcome yet still reads as failed, not pending.
    with ledger.begin() as conn:
        conn.execute(update(outbox).where(outbox.c.kind == "merit").values(status="failed"))
    card = app_client.get(f"/v1/attempts/{attempt}/merit-card", headers=auth(token)).json()
    assert card["status"] == "failed_for_review" and card["merit_card"] is None


def test_a_ready_outcome_wins_over_a_duplicate_failure(app_client: TestClient, ledger: Engine) -> None:
    token, attempt = _finished(app_client)
    _outcome(ledger, attempt, "merit", "failed_for_review", {})
    _outcome(ledger, attempt, "merit", "ready", {"score": 1})
    card = app_client.get(f"/v1/attempts/{attempt}/merit-card", headers=auth(token)).json()
    assert card["status"] == "ready"


def test_an_open_attempt_owes_no_outcome_yet(app_client: TestClient) -> None:
    token = token_for(app_client)
    attempt = start(app_client, token)
    assert app_client.get(f"/v1/attempts/{attempt}/merit-card", headers=auth(token)).status_code == 409
    assert app_client.get("/v1/attempts/nope/narrative", headers=auth(token)).status_code == 404
