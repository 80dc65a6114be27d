"""Starting and finishing attempts."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Response

from stack.ledger.attempts import ExamRuleRefused, StartKeyConflict, ensure_student, finish_attempt, start_attempt
from stack.web.guards import account_limit, documented
from stack.web.routes.common import AttemptDep, PrincipalDep, StateDep, attempt_links

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(dependencies=[Depends(account_limit)])

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", min_length=1, max_length=255)]


_REPLAYED = {200: {"description": "a replay: the attempt this Idempotency-Key already started (replayed=true)"}}


@router.post("/v1/attempts", status_code=201, responses={**documented(401, 404, 409, 422, 429), **_REPLAYED})
def create_attempt(principal: PrincipalDep, state: StateDep, response: Response, key: IdempotencyKey = None) -> dict:
    questions = state.question_count(principal.exam_code)
    if questions is None:
        raise HTTPException(status_code=404, detail="unknown exam")
    # A valid token whose student row is missing (ledger reset since issuance) would
    # otherwise fail the attempt's foreign key with a 500; attempt starts are rare.
    ensure_student(state.engine, principal.student_id)
    try:
        attempt, created = start_attempt(state.engine, principal.student_id, principal.exam_code, key)
    except StartKeyConflict:
        raise HTTPException(status_code=409, detail="Idempotency-Key already started an attempt of another exam") from None
    except ExamRuleRefused as refused:  # outside the window, or no attempt left (stack/ledger/exam_rules.py)
        raise HTTPException(status_code=409, detail=str(refused)) from None
    if not created:
        response.status_code = 200
    return {
        "attempt_id": attempt.id,
        "exam_code": attempt.exam_code,
        "status": attempt.status,
        "question_count": questions,
        "started_at": attempt.started_at,
        "replayed": not created,
        "links": attempt_links(attempt.id),
    }


@router.post("/v1/attempts/{attempt_id}/finish", status_code=202, responses=documented(401, 404, 409, 422, 429))
def finish(attempt: AttemptDep, state: StateDep) -> dict:
    try:
        result = finish_attempt(state.engine, attempt.id, state.settings.node_name)
    except LookupError:
        raise HTTPException(status_code=404, detail="unknown attempt") from None
    except ExamRuleRefused as refused:  # past the close and its grace period
        raise HTTPException(status_code=409, detail=str(refused)) from None
    # After the commit, never before: the rows exist whether or not this hand-off works.
    state.dispatcher.submit(attempt.id)
    links = attempt_links(attempt.id)
    return {
        "attempt_id": attempt.id,
        "status": result.attempt.status,
        "finished_at": result.attempt.finished_at,
        "replayed": not result.operation_ids,
        "links": {"merit_card": links["merit_card"], "narrative": links["narrative"]},
    }
