"""Session tokens: HMAC-signed, expiring, and the only identity a request carries.

A token is ``v1.<payload>.<signature>`` (URL-safe base64, no padding), the payload
being JSON ``{"sid", "exam", "exp"}``: it is scoped to one student AND one exam, and
every attempt route checks both. Identity is never derived from an address: behind a
load balancer every student shares one (the incident's 429 storm). Tokens are issued
only against a roster access code (routes_sessions); the secret is random per run.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass

from fastapi import HTTPException, Request

__all__ = ["InvalidToken", "Principal", "bearer_principal", "issue_token", "verify_token"]

_VERSION = "v1"


class InvalidToken(Exception):
    """Missing, malformed, forged or expired token."""


@dataclass(frozen=True)
class Principal:
    student_id: str
    exam_code: str
    expires_at: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: str, message: str) -> str:
    return _b64(hmac.new(secret.encode("utf-8"), message.encode("ascii"), hashlib.sha256).digest())


def issue_token(secret: str, student_id: str, exam_code: str, ttl: float, now: float | None = None) -> tuple[str, float]:
    """A signed token and its expiry (epoch seconds)."""
    expires_at = (time.time() if now is None else now) + ttl
    payload = _b64(json.dumps({"sid": student_id, "exam": exam_code, "exp": expires_at}).encode("utf-8"))
    message = f"{_VERSION}.{payload}"
    return f"{message}.{_sign(secret, message)}", expires_at


def verify_token(secret: str, token: str, now: float | None = None) -> Principal:
    if not token.isascii():  # a real token is base64 and dots; anything else is not one (and not a 500)
        raise InvalidToken("malformed token")
    version, _, rest = token.partition(".")
    payload, _, signature = rest.partition(".")
    if version != _VERSION or not payload or not signature:
        raise InvalidToken("malformed token")
    # Compare signatures before parsing anything the client sent.
    if not hmac.compare_digest(_sign(secret, f"{version}.{payload}"), signature):
        raise InvalidToken("bad signature")
    try:
        claims = json.loads(_unb64(payload))
        principal = Principal(str(claims["sid"]), str(claims["exam"]), float(claims["exp"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidToken("malformed claims") from exc
    if principal.expires_at <= (time.time() if now is None else now):
        raise InvalidToken("expired token")
    return principal


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(status_code=401, detail=message, headers={"WWW-Authenticate": "Bearer"})


def bearer_principal(request: Request) -> Principal:
    """FastAPI dependency: the student of the request's Bearer token, else 401."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("missing bearer token")
    secret = request.app.state.proctor.settings.token_secret
    try:
        return verify_token(secret, token.strip())
    except InvalidToken as exc:
        raise _unauthorized(str(exc)) from None
