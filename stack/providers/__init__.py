"""Fake external providers: an AI narrative service and an SMS gateway.

Both are built from the small kit below: an effect ledger (``ledger.py``) so a
checker can count real side effects, fault knobs (``faults.py``) set through a
loopback-only admin API, and one call pipeline (latency -> admission: revoked key,
forced refusal, invalid payload, own calls/min window, credit -> work -> record the
effect with its arrival time and cost -> optional hold (``hold.py``), delay or lost response
-> answer).
"""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from fastapi import APIRouter, Body, Header, HTTPException, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from stack.admin_auth import require_admin
from stack.config import Settings
from stack.headers import RECEIVED_AT_HEADER
from stack.providers.faults import Admission, FaultState, Faults, Refusal
from stack.providers.hold import AnswerHold
from stack.providers.ledger import EffectLedger, IdempotencyConflict, Recorded

__all__ = ["RECEIVED_AT_HEADER", "Provider", "ResponseLost", "admin_router", "caller_guard", "health_router",
           "lookup", "perform"]

IDEMPOTENCY_KEY_MAX = 255


@dataclass
class Provider:
    """The state of one fake provider process."""

    name: str
    settings: Settings
    work_seconds: float
    ledger: EffectLedger = field(init=False)
    faults: FaultState = field(init=False)
    hold: AnswerHold = field(default_factory=AnswerHold)
    refusals: list[dict[str, Any]] = field(default_factory=list)
    """Every refused call (arrival, operation, status, Retry-After): what a retry-after check
    compares the next arrival of that operation with. In memory: a restarted provider starts empty."""

    def __post_init__(self) -> None:
        self.ledger = EffectLedger(self.settings.run_dir / f"{self.name}_effects.db")
        self.faults = FaultState(window_seconds=self.settings.scaled(60.0))  # one case-minute


class ResponseLost(ConnectionError):
    """Raised mid-response on purpose: the effect is recorded, the caller hears nothing whole."""


def _received(arrived: float) -> dict[str, str]:
    return {RECEIVED_AT_HEADER: f"{arrived:.6f}"}


def _lost_response(headers: dict[str, str]) -> StreamingResponse:
    """Headers and a first chunk go out, then the body breaks off: uvicorn closes the
    connection and the caller sees an incomplete response, as after a reset."""

    def broken_body() -> Iterator[bytes]:
        yield b'{"narrative'
        raise ResponseLost("response lost after the effect was recorded (lose_response_next)")

    return StreamingResponse(broken_body(), status_code=201, media_type="application/json", headers=headers)


def caller_guard(provider: Provider) -> Callable[..., None]:
    """The data routes' dependency: the lanes' per-run bearer token, compared in constant time.

    A caller's address proves nothing (any local process is on loopback) and a student's
    session token is not this token, so both get 401. A provider started without a token
    refuses every data call (503): it never falls back to trusting its network."""
    expected = (provider.settings.ai_client_token if provider.name == "ai" else provider.settings.sms_client_token).encode()

    def require_caller(authorization: str | None = Header(None)) -> None:
        if not expected:
            raise HTTPException(503, f"{provider.name} provider has no client token configured")
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode(), expected):
            raise HTTPException(401, "bad or missing client credential", headers={"WWW-Authenticate": "Bearer"})

    return require_caller


def perform(
    provider: Provider,
    operation_id: str,
    idempotency_key: str | None,
    request_body: dict[str, Any],
    respond: Callable[[int], dict[str, Any]],
    source: str = "",
) -> Response:
    """Run one side-effecting call through the fault knobs and the effect ledger; ``source`` is
    the caller's address as the provider saw it (recorded with the effect: the egress proof)."""
    if idempotency_key is not None and not 0 < len(idempotency_key) <= IDEMPOTENCY_KEY_MAX:
        raise HTTPException(422, f"Idempotency-Key must be 1-{IDEMPOTENCY_KEY_MAX} characters")
    faults = provider.faults.current()
    time.sleep(faults.latency_seconds)
    arrived = time.time()
    admitted = provider.faults.admit(operation_id, now=arrived)
    if isinstance(admitted, Refusal):
        provider.refusals.append({"operation_id": operation_id, "at": arrived, "status": admitted.status,
                                  "retry_after_seconds": admitted.body.get("retry_after_seconds")})
        return JSONResponse(admitted.body, status_code=admitted.status,
                            headers={**admitted.headers, **_received(arrived)})
    time.sleep(provider.work_seconds)
    recorded = _record(provider, operation_id, idempotency_key, request_body, respond, admitted, source)
    headers = _received(arrived)
    if recorded.replayed:
        provider.faults.refund(admitted)
        headers["Idempotent-Replayed"] = "true"
    else:
        # The effect is committed; the caller has not heard yet (unknown outcome window).
        provider.hold.wait(recorded.effect.id, recorded.effect.created_at)
        time.sleep(provider.faults.current().delay_after_effect_seconds)
        if provider.faults.take_lost_response():
            return _lost_response(headers)
    return JSONResponse(recorded.effect.response, status_code=recorded.effect.status_code, headers=headers)


def _record(
    provider: Provider,
    operation_id: str,
    idempotency_key: str | None,
    request_body: dict[str, Any],
    respond: Callable[[int], dict[str, Any]],
    admitted: Admission,
    source: str,
) -> Recorded:
    try:
        return provider.ledger.record(
            operation_id, idempotency_key, request_body, lambda effect_id: (201, respond(effect_id)),
            started_at=admitted.started_at, cost=admitted.cost, source=source,
        )
    except IdempotencyConflict:
        provider.faults.refund(admitted)
        raise HTTPException(409, "Idempotency-Key reused with a different request body",
                            headers=_received(admitted.started_at)) from None


def lookup(provider: Provider, operation_id: str) -> dict[str, Any]:
    """What the provider did for an operation: lets a caller reconcile before replaying."""
    effects = provider.ledger.for_operation(operation_id)
    if not effects:
        raise HTTPException(404, f"no effect for operation {operation_id}")
    return {"operation_id": operation_id, "effects": len(effects), "response": effects[-1].response}


def admin_router(provider: Provider) -> APIRouter:
    router = APIRouter(prefix="/admin")

    @router.get("/ledger")
    def ledger(request: Request) -> dict[str, Any]:
        require_admin(request, provider.settings.admin_token)
        effects = [effect.export() for effect in provider.ledger.all()]
        return {"provider": provider.name, "exported_at": time.time(), "effects": effects,
                "refusals": list(provider.refusals)}

    @router.get("/faults")
    def get_faults(request: Request) -> dict[str, Any]:
        require_admin(request, provider.settings.admin_token)
        return provider.faults.as_dict()

    @router.put("/faults")
    def put_faults(
        request: Request, knobs: dict[str, Any] = Body(...)
    ) -> dict[str, Any]:
        require_admin(request, provider.settings.admin_token)
        try:
            provider.faults.set(Faults(**knobs))
        except (TypeError, ValueError) as exc:
            raise HTTPException(422, str(exc)) from None
        return provider.faults.as_dict()

    @router.delete("/faults")
    def delete_faults(request: Request) -> dict[str, Any]:
        require_admin(request, provider.settings.admin_token)
        provider.faults.clear()
        return provider.faults.as_dict()

    @router.get("/hold")
    def get_hold(request: Request) -> dict[str, Any]:
        require_admin(request, provider.settings.admin_token)
        return provider.hold.state()

    @router.post("/hold")
    def arm_hold(request: Request) -> dict[str, Any]:
        require_admin(request, provider.settings.admin_token)
        return provider.hold.arm()

    @router.delete("/hold")
    def release_hold(request: Request) -> dict[str, Any]:
        require_admin(request, provider.settings.admin_token)
        return provider.hold.release()

    return router


def health_router(provider: Provider) -> APIRouter:
    """``GET /healthz`` for the runner's readiness probe; answers while faults are set,
    since a provider that returns 429s on purpose is still up."""
    router = APIRouter()

    @router.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok", "provider": provider.name}

    return router
