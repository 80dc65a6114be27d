"""POST /v1/sessions: a signed token for a rostered student who proves it with the access code."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, Field

from stack.ledger.roster import verify_access_code
from stack.web.auth import issue_token
from stack.web.guards import client_address, documented
from stack.web.inputs import Text
from stack.web.ratelimit import LOGIN_FAILURE_TIERS, LOGIN_SOURCE_FAILURES, RequestLimiter, Verdict, too_many
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
    limiter, source = state.limiter, client_address(request)
    network = limiter.hit(limiter.login_network, "login", source)
    if not network.allowed:
        raise too_many(network)
    guesses = ("login-failures", body.exam_code, body.student_id, source)
    # Brute force, per account and source: once this source's failures for the account reach a
    # tier, even the right code from here waits, so a guesser learns nothing from 401 vs 429.
    # Another source (the student) is not affected: lockout cannot be triggered from elsewhere.
    blocked = _first_refusal(limiter, guesses)
    if blocked is not None:
        raise too_many(blocked)
    with state.read_engine.connect() as conn:
        enrolled = verify_access_code(conn, state.settings.roster_key, body.exam_code, body.student_id, body.access_code)
    if not enrolled:
        for tier in LOGIN_FAILURE_TIERS:
            limiter.hit(tier, *guesses)
        limiter.hit(LOGIN_SOURCE_FAILURES, "login-source-failures", source)
        raise _refused()
    settings = state.settings
    token, expires_at = issue_token(settings.token_secret, body.student_id, body.exam_code, settings.token_ttl_seconds)
    return {"token": token, "expires_at": expires_at, "student_id": body.student_id, "exam_code": body.exam_code}


def _first_refusal(limiter: RequestLimiter, guesses: tuple[str, ...]) -> Verdict | None:
    """The tier (or the source's cap) that refuses this login attempt, without counting it."""
    source_cap = limiter.peek(LOGIN_SOURCE_FAILURES, "login-source-failures", guesses[-1])
    if not source_cap.allowed:
        return source_cap
    for tier in LOGIN_FAILURE_TIERS:
        verdict = limiter.peek(tier, *guesses)
        if not verdict.allowed:
            return verdict
    return None
