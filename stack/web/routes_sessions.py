"""POST /v1/sessions: a signed token for a student and an exam."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from stack.ledger.attempts import ensure_student
from stack.web.auth import issue_token
from stack.web.routes_common import StateDep

__all__ = ["SessionRequest", "router"]

router = APIRouter()


class SessionRequest(BaseModel):
    student_id: str = Field(min_length=1, max_length=64)  # the ledger's column width
    exam_code: str = Field(min_length=1, max_length=64)


@router.post("/v1/sessions", status_code=201)
def create_session(body: SessionRequest, state: StateDep) -> dict:
    known = state.question_count(body.exam_code) is not None
    if not known:
        raise HTTPException(status_code=404, detail="unknown exam")
    # Students are registered on first sight: the exam platform, not us, owns enrolment.
    ensure_student(state.engine, body.student_id)
    settings = state.settings
    token, expires_at = issue_token(settings.token_secret, body.student_id, body.exam_code, settings.token_ttl_seconds)
    return {"token": token, "expires_at": expires_at, "student_id": body.student_id, "exam_code": body.exam_code}
