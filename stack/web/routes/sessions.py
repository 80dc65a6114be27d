"""POST /v1/sessions: a signed token for a rostered student who proves it with the access code."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, Field

from stack.ledger.roster import verify_access_code
from stack.web.auth import issue_token
from stack.web.guards import client_address, documented
from stack.web.inputs import Text
from stack.web.ratelimit import LOGIN_FAILURES, too_many
from stack.web.routes.common import StateDep

__all__ = ["SessionRequest", "router"]

router = APIRouter()

_REFUSED = "unknown student, exam or access code"
"""One reply for every bad pair: it never says which half was wrong."""


class SessionRequest(BaseModel):
    student_id: Text = Field(min_length=1, max_length=64)  # the ledger's column width
    exam_code: Text = Field(min_length=1, max_length=64)
    access_code: Text = Field(min_length=1, max_length=128)


def _refused() -> HTTPException:
    return HTTPException(status_code=401, detail=_REFUSED, headers={"WWW-Authenticate": "AccessCode"})


@router.post("/v1/sessions", status_code=201, responses=documented(401, 422, 429))
def create_session(body: SessionRequest, request: Request, state: StateDep) -> dict:
    limiter = state.limiter
    network = limiter.hit(limiter.login_network, "login", client_address(request))
    if not network.allowed:
        raise too_many(network)
    account = ("login-failures", body.exam_code, body.student_id)
    # Brute force per account: once an account's failures reach the limit, even the right
    # code waits, so a guesser learns nothing from which replies are 401 and which 429.
    blocked = limiter.peek(LOGIN_FAILURES, *account)
    if not blocked.allowed:
        raise too_many(blocked)
    with state.read_engine.connect() as conn:
        enrolled = verify_access_code(conn, state.settings.roster_key, body.exam_code, body.student_id, body.access_code)
    if not enrolled:
        limiter.hit(LOGIN_FAILURES, *account)
        raise _refused()
    settings = state.settings
    token, expires_at = issue_token(settings.token_secret, body.student_id, body.exam_code, settings.token_ttl_seconds)
    return {"token": token, "expires_at": expires_at, "student_id": body.student_id, "exam_code": body.exam_code}
