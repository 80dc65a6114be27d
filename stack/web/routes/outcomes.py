"""What a student is told about owed work: honest pending / ready / failed_for_review."""

from __future__ import annotations

import hashlib

from fastapi import APIRouter, Depends, HTTPException

from stack.ledger.attempts import Attempt, OutcomeView, outcome_for
from stack.web.guards import account_limit, documented
from stack.web.routes.common import AttemptDep, StateDep

__all__ = ["NARRATIVE_PLACEHOLDER", "REVIEW_PLACEHOLDER", "router", "student_card"]

router = APIRouter(dependencies=[Depends(account_limit)])

NARRATIVE_PLACEHOLDER = (
    "Your personalised feedback is still being written. This is placeholder text, "
    "not your narrative; check back later."
)
REVIEW_PLACEHOLDER = (
    "Your personalised feedback could not be produced automatically and is held for "
    "review. This is placeholder text, not your narrative."
)


def _view(state: StateDep, attempt: Attempt, kind: str) -> OutcomeView:
    with state.read_engine.connect() as conn:
        view = outcome_for(conn, attempt.id, kind)
    if view is None:
        raise HTTPException(status_code=409, detail="attempt is not finished: no outcome is owed yet")
    return view


def _common(attempt: Attempt, view: OutcomeView) -> dict:
    return {
        "attempt_id": attempt.id,
        "operation_id": view.operation_id,
        "status": view.status,
        "outbox_status": view.outbox_status,
        "ready_at": view.created_at,
    }


def student_card(payload: dict) -> dict:
    """The merit card a student sees: the attempts it was ranked against become a count and a
    digest (other students' attempt ids are theirs); the admin export keeps the whole list,
    which is what the checkers read (chaos/checkers/payloads.py)."""
    card = {key: value for key, value in payload.items() if key != "ranked_against"}
    if isinstance(payload.get("ranked_against"), list):
        ranked = sorted(str(a) for a in payload["ranked_against"])
        card["ranked_against_count"] = len(ranked)
        card["ranked_against_digest"] = hashlib.sha256("\n".join(ranked).encode()).hexdigest()
    return card


@router.get("/v1/attempts/{attempt_id}/merit-card", responses=documented(401, 404, 409, 422, 429))
def merit_card(attempt: AttemptDep, state: StateDep) -> dict:
    view = _view(state, attempt, "merit")
    card = student_card(view.payload or {}) if view.status == "ready" else None
    return {**_common(attempt, view), "merit_card": card}


@router.get("/v1/attempts/{attempt_id}/narrative", responses=documented(401, 404, 409, 422, 429))
def narrative(attempt: AttemptDep, state: StateDep) -> dict:
    view = _view(state, attempt, "narrative")
    if view.status == "ready":
        payload = view.payload or {}
        return {**_common(attempt, view), "placeholder": False, "text": payload.get("text"), "narrative": payload}
    # Anything not ready is labelled as a placeholder, so no template is ever passed off as real.
    text = REVIEW_PLACEHOLDER if view.status == "failed_for_review" else NARRATIVE_PLACEHOLDER
    return {**_common(attempt, view), "placeholder": True, "text": text, "narrative": None}
