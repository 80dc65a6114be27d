"""PUT an answer revision and GET the current answers: committed to the ledger before the
reply, read from it; Valkey plays no part. Revisions: stack/ledger/revisions.py."""

from __future__ import annotations

import re
import time
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Response
from pydantic import BaseModel, Field

from stack.ledger.revisions import REVISION_TAKEN, AnswerRejected, current_answers
from stack.ledger.attempts import Attempt
from stack.ledger.exam_rules import ExamRuleRefused
from stack.web.guards import account_limit, documented
from stack.web.inputs import Text
from stack.web.routes.common import AttemptDep, StateDep

__all__ = ["AnswerBody", "router"]

router = APIRouter(dependencies=[Depends(account_limit)])

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


def _check_question(attempt: Attempt, question: str, count: int | None) -> None:
    match = _QUESTION.fullmatch(question)
    if count is None or match is None or int(match.group(1)) > count:
        # Never echoes the path segment: a reflected 3 KB of <img ...> under a JSON type was a finding.
        raise HTTPException(status_code=404, detail="unknown question for this exam")


@router.put("/v1/attempts/{attempt_id}/answers/{question}", responses=documented(401, 404, 409, 422, 429))
def put_answer(
    question: str,
    body: AnswerBody,
    attempt: AttemptDep,
    state: StateDep,
    response: Response,
    key: Annotated[str, Header(alias="Idempotency-Key", min_length=1, max_length=255)],
) -> dict:
    _check_question(attempt, question, state.question_count(attempt.exam_code))
    try:
        state.rules.get(attempt.exam_code).check_answer(time.time())
    except ExamRuleRefused as refused:  # outside the exam's window: nothing is accepted after the close
        raise HTTPException(status_code=409, detail=str(refused)) from None
    try:
        receipt = state.answers.accept(attempt.id, question, body.revision, body.content, key)
    except AnswerRejected as exc:
        status = _REJECTION_STATUS.get(exc.reason, 409)
        raise HTTPException(status_code=status, detail=_REJECTION_TEXT[exc.reason]) from None
    response.status_code = 200 if receipt.replayed else 201
    return receipt.as_reply()


@router.get("/v1/attempts/{attempt_id}/answers", responses=documented(401, 404, 429))
def get_answers(attempt: AttemptDep, state: StateDep) -> dict:
    """The current (highest accepted) revision of every answered question, read from the ledger."""
    with state.read_engine.connect() as conn:
        current = current_answers(conn, attempt.id)
    return {"attempt_id": attempt.id, "answers": current}
