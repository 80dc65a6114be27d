"""PUT an answer revision and GET the current answers: committed to the ledger before the
reply, read from it; Valkey plays no part. Revisions: stack/ledger/revisions.py."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from stack.ledger.exam_rules import ExamRuleRefused
from stack.ledger.revisions import REVISION_TAKEN, AnswerRejected, RevisionReceipt, current_answers
from stack.web.auth import Principal
from stack.web.guards import account_limit, documented, limit_account, route_of
from stack.web.inputs import Text
from stack.web.routes.common import AttemptDep, PrincipalDep, StateDep, WebState

__all__ = ["AnswerBody", "router"]

router = APIRouter()

_QUESTION = re.compile(r"q([1-9][0-9]*)")

_REJECTION_STATUS = {AnswerRejected.UNKNOWN_ATTEMPT: 404}
_REJECTION_TEXT = {
    AnswerRejected.UNKNOWN_ATTEMPT: "unknown attempt",
    AnswerRejected.FINISHED: "attempt is finished",
    AnswerRejected.KEY_OTHER_BODY: "Idempotency-Key already used with a different body",
    AnswerRejected.KEY_OTHER_QUESTION: "Idempotency-Key already used for another question",
    REVISION_TAKEN: "this revision of the question was already written under another Idempotency-Key",
}


class AnswerBody(BaseModel):
    content: Text
    revision: int = Field(
        default=1, ge=1, le=2**31 - 1,
        description="Client revision number of this question's answer, growing with every autosave. The "
                    "highest accepted revision is the answer; a lower one arriving late is logged and "
                    "acknowledged with superseded=true. Part of the body an Idempotency-Key is bound to.",
    )


def _check_question(exam_code: str, question: str, count: int | None) -> None:
    match = _QUESTION.fullmatch(question)
    if count is None or match is None or int(match.group(1)) > count:
        # Never echoes the path segment: a reflected 3 KB of <img ...> under a JSON type was a finding.
        raise HTTPException(status_code=404, detail="unknown question for this exam")


@dataclass(frozen=True)
class _AnswerRequest:
    """What the answer's one threadpool hop needs, gathered on the event loop."""

    principal: Principal
    attempt_id: str
    question: str
    body: AnswerBody
    key: str
    method: str
    route: str


# Async, so FastAPI runs it on the event loop: the token check, the body's validation and the reply
# do no I/O, and the limit, the ownership check and the write share one threadpool hop (each sync
# dependency was a hop of its own: a queue hand-off and a GIL switch each way, docs/ramp.md).
@router.put("/v1/attempts/{attempt_id}/answers/{question}", responses=documented(401, 404, 409, 422, 429))
async def put_answer(
    attempt_id: str,
    question: str,
    body: AnswerBody,
    principal: PrincipalDep,
    state: StateDep,
    request: Request,
    key: Annotated[str, Header(alias="Idempotency-Key", min_length=1, max_length=255)],
) -> dict:
    asked = _AnswerRequest(principal, attempt_id, question, body, key, request.method, route_of(request))
    receipt = await run_in_threadpool(_accept_answer, state, asked)
    # A Response as it is: FastAPI skips validating and re-encoding the returned dict.
    return JSONResponse(receipt.as_reply(), status_code=200 if receipt.replayed else 201)  # type: ignore[return-value]


def _accept_answer(state: WebState, asked: _AnswerRequest) -> RevisionReceipt:
    """The answer's blocking part, in the order the checks always had: the account's limit (429),
    the attempt's owner (404 as for an unknown id), the question (404), the exam window (409),
    then the ledger's own transaction (stack/ledger/revisions.py)."""
    limit_account(state.limiter, asked.principal, asked.method, asked.route)
    exam_code = _owned_exam(state, asked.principal, asked.attempt_id)
    _check_question(exam_code, asked.question, state.question_count(exam_code))
    try:
        state.rules.get(exam_code).check_answer(time.time())
    except ExamRuleRefused as refused:  # outside the exam's window: nothing is accepted after the close
        raise HTTPException(status_code=409, detail=str(refused)) from None
    try:
        return state.answers.accept(asked.attempt_id, asked.question, asked.body.revision, asked.body.content, asked.key)
    except AnswerRejected as exc:
        status = _REJECTION_STATUS.get(exc.reason, 409)
        raise HTTPException(status_code=status, detail=_REJECTION_TEXT[exc.reason]) from None


def _owned_exam(state: WebState, principal: Principal, attempt_id: str) -> str:
    """The attempt's exam if the token covers it; anything else is the 404 of an unknown id
    (the same rule as ``owned_attempt``, from the node's memory of owners after the first read)."""
    owner = state.owners.owner_of(attempt_id)
    if owner != (principal.student_id, principal.exam_code):
        raise HTTPException(status_code=404, detail="unknown attempt")
    return principal.exam_code


@router.get("/v1/attempts/{attempt_id}/answers", responses=documented(401, 404, 429),
            dependencies=[Depends(account_limit)])
def get_answers(attempt: AttemptDep, state: StateDep) -> dict:
    """The current (highest accepted) revision of every answered question, read from the ledger."""
    with state.read_engine.connect() as conn:
        current = current_answers(conn, attempt.id)
    return {"attempt_id": attempt.id, "answers": current}
