"""Fake AI narrative provider: ``python -m uvicorn stack.providers.ai:create_app --factory``.

A narrative call takes ``CASE_AI_CALL_SECONDS`` of case time, like the seed's
ten-second AI jobs. Each accepted call is one effect (a billed generation).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from stack.config import CASE_AI_CALL_SECONDS, Settings, load_settings
from stack.providers import Provider, admin_router, caller_guard, health_router, lookup, perform

__all__ = ["NarrativeRequest", "create_app"]


class NarrativeRequest(BaseModel):
    operation_id: str = Field(min_length=1, max_length=128)
    attempt_id: str = Field(min_length=1, max_length=64)
    score: int = Field(ge=0)
    position: int = Field(ge=1)


def narrative_text(request: NarrativeRequest) -> str:
    return (
        f"Attempt {request.attempt_id} scored {request.score} and placed #{request.position}. "
        "Strong, steady work: review the missed questions and keep going."
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    provider = Provider("ai", settings, work_seconds=settings.scaled(CASE_AI_CALL_SECONDS))
    app = FastAPI(title="Fake AI provider")
    app.state.provider = provider
    app.include_router(admin_router(provider))
    app.include_router(health_router(provider))

    lanes_only = [Depends(caller_guard(provider))]  # every data route: the lanes' token, nothing else

    @app.post("/v1/narratives", dependencies=lanes_only)
    def create_narrative(
        body: NarrativeRequest, request: Request, idempotency_key: str | None = Header(None)
    ) -> Response:
        def respond(effect_id: int) -> dict[str, Any]:
            return {
                "narrative_id": f"nar_{effect_id}",
                "operation_id": body.operation_id,
                "attempt_id": body.attempt_id,
                "text": narrative_text(body),
                "created_at": time.time(),
            }

        return perform(provider, body.operation_id, idempotency_key, body.model_dump(), respond,
                       source=request.client.host if request.client else "")

    @app.get("/v1/narratives/{operation_id}", dependencies=lanes_only)
    def get_narrative(operation_id: str) -> dict[str, Any]:
        return lookup(provider, operation_id)

    return app
