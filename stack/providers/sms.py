"""Fake SMS gateway: ``python -m uvicorn stack.providers.sms:create_app --factory``.

Like the seed's gateway it accepts traffic only from allow-listed source
addresses (``Settings.sms_allowlist``, env ``PROCTOR_SMS_ALLOWLIST``: comma-separated
CIDRs, default ``127.0.0.1/32``): a replacement worker on another address gets 403.
An address is no credential, though: every data route also wants the lanes' per-run
bearer token (``PROCTOR_SMS_CLIENT_TOKEN``; ``stack.providers.caller_guard``).
Each accepted message is one effect (a text the student receives).
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from stack.config import CASE_SMS_CALL_SECONDS, Settings, load_settings
from stack.providers import Provider, admin_router, caller_guard, health_router, lookup, perform

__all__ = ["MessageRequest", "create_app", "parse_allowlist"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class MessageRequest(BaseModel):
    operation_id: str = Field(min_length=1, max_length=128)
    to: str = Field(min_length=1, max_length=64)
    body: str = Field(min_length=1, max_length=1600)


def parse_allowlist(networks: tuple[str, ...]) -> tuple[Network, ...]:
    """The allow-list's networks (already checked by ``load_settings``)."""
    return tuple(ipaddress.ip_network(network) for network in networks)


def _allowed(host: str, allowlist: tuple[Network, ...]) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in allowlist)


async def _operation_of(request: Request) -> str:
    """The operation a refused request was about (path or body), best effort: "" when unreadable."""
    if "operation_id" in request.path_params:
        return str(request.path_params["operation_id"])[:128]
    try:
        body = await request.json()
    except ValueError:
        return ""
    value = body.get("operation_id") if isinstance(body, dict) else None
    return value[:128] if isinstance(value, str) else ""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    allowlist = parse_allowlist(settings.sms_allowlist)
    provider = Provider("sms", settings, work_seconds=settings.scaled(CASE_SMS_CALL_SECONDS))
    app = FastAPI(title="Fake SMS gateway")
    app.state.provider = provider
    app.include_router(admin_router(provider))
    app.include_router(health_router(provider))

    async def source_allowed(request: Request) -> None:
        host = request.client.host if request.client else ""
        if not _allowed(host, allowlist):
            # Kept with the other refusals (GET /admin/ledger): the egress checker's evidence.
            provider.refusals.append({"operation_id": await _operation_of(request), "at": time.time(),
                                      "status": 403, "source": host})
            raise HTTPException(403, f"source address {host} is not on the gateway allow-list")

    lanes_only = [Depends(source_allowed), Depends(caller_guard(provider))]  # the seed's address rule, then the credential

    @app.post("/v1/messages", dependencies=lanes_only)
    def send_message(body: MessageRequest, request: Request, idempotency_key: str | None = Header(None)) -> Response:
        def respond(effect_id: int) -> dict[str, Any]:
            return {
                "message_id": f"msg_{effect_id}",
                "operation_id": body.operation_id,
                "to": body.to,
                "body": body.body,  # what was sent: a reconciling caller records this, not its own retry
                "status": "accepted",
                "created_at": time.time(),
            }

        return perform(provider, body.operation_id, idempotency_key, body.model_dump(), respond,
                       source=request.client.host if request.client else "")

    @app.get("/v1/messages/{operation_id}", dependencies=lanes_only)
    def get_message(operation_id: str) -> dict[str, Any]:
        return lookup(provider, operation_id)

    return app
