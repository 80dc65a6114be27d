"""Admin authentication, defined once: the web nodes' admin listener, the fake providers'
admin API and the embedded deployment's scale executor all ask :func:`admin_allowed`.

An admin caller is a loopback peer (the socket's address, never a forwarded header) that
presents the run's admin token in ``X-Admin-Token``, compared in constant time. Anything
else is refused with one status (403) and one message, so a caller cannot tell a wrong token
from a wrong address, and no service drifts to its own rule (the providers once compared
with ``!=`` and answered 401).
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import TYPE_CHECKING

from stack.headers import ADMIN_TOKEN_HEADER

if TYPE_CHECKING:  # FastAPI only for the routes: the embedded supervisor asks admin_allowed without it
    from fastapi import Request

__all__ = ["ADMIN_REFUSED", "ADMIN_REFUSED_DETAIL", "admin_allowed", "is_loopback", "require_admin"]

ADMIN_REFUSED = 403
ADMIN_REFUSED_DETAIL = f"admin routes need {ADMIN_TOKEN_HEADER} from loopback"


def is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def admin_allowed(peer: str | None, presented: str | None, expected: str) -> bool:
    """A loopback ``peer`` presenting ``expected`` (constant-time comparison; an empty token never passes)."""
    return bool(expected) and is_loopback(peer) and hmac.compare_digest((presented or "").encode(), expected.encode())


def require_admin(request: Request, expected: str) -> None:
    """For a FastAPI route: :data:`ADMIN_REFUSED` unless the request comes from an admin caller."""
    from fastapi import HTTPException  # the routes have FastAPI loaded already

    peer = request.client.host if request.client else None
    if not admin_allowed(peer, request.headers.get(ADMIN_TOKEN_HEADER), expected):
        raise HTTPException(status_code=ADMIN_REFUSED, detail=ADMIN_REFUSED_DETAIL)
