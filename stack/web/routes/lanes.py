"""Operator routes of the AI lane (issue #11), on the node's admin listener (X-Admin-Token,
loopback peers), so `proctor lane|review|alerts|audit` work against any deployment.

- ``GET /admin/lanes/ai``, ``POST /admin/lanes/ai/pause``, ``POST /admin/lanes/ai/resume``
  (resume sends rows past their deadline to review first);
- ``GET /admin/review``, ``POST /admin/review/{operation_id}/replay`` (audited, once);
- ``GET /admin/alerts``;
- ``GET /admin/audit/billing``: the stack's reservations, the AI provider's own ledger
  (read from the provider's admin API) and the reservations read again after it; ``proctor audit billing``
  judges them with chaos/checkers/billing.py (the stack imports no analysis code).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import httpx
from fastapi import APIRouter, Body, Depends, HTTPException

from stack.headers import ADMIN_TOKEN_HEADER
from stack.lanes.ai import billing, lanestate
from stack.lanes.ai.review import ReviewError, list_review, replay, resume_lane
from stack.web.routes.common import StateDep, require_admin

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])

Lane = Literal["ai", "sms"]  # the SMS lane pauses on a gateway 402/401 too (stack/lanes/sms_refusals.py)
_ACTOR = "operator"


@router.get("/lanes/{lane}")
def lane_state(lane: Lane, state: StateDep) -> dict[str, Any]:
    with state.read_engine.connect() as conn:
        return lanestate.state(conn, lane)


@router.post("/lanes/{lane}/pause")
def pause_lane(lane: Lane, state: StateDep, reason: str = Body("operator pause", embed=True)) -> dict[str, Any]:
    with state.engine.begin() as conn:
        changed = lanestate.pause(conn, lane, reason, actor=_ACTOR)
        return {**lanestate.state(conn, lane), "changed": changed}


@router.post("/lanes/{lane}/resume")
def resume(lane: Lane, state: StateDep) -> dict[str, Any]:
    with state.engine.begin() as conn:
        return resume_lane(conn, lane, _ACTOR, state.settings.time_scale)


@router.get("/review")
def review(state: StateDep) -> dict[str, Any]:
    with state.read_engine.connect() as conn:
        return {"items": list_review(conn)}


@router.post("/review/{operation_id}/replay")
def replay_item(operation_id: str, state: StateDep) -> dict[str, Any]:
    try:
        with state.engine.begin() as conn:
            return replay(conn, operation_id, _ACTOR)
    except ReviewError as exc:
        raise HTTPException(404, str(exc)) from None


@router.get("/alerts")
def alerts(state: StateDep) -> dict[str, Any]:
    with state.read_engine.connect() as conn:
        return {"alerts": lanestate.list_alerts(conn)}


def _provider_effects(state: Any) -> list[dict[str, Any]]:
    url = f"{state.settings.ai_url}/admin/ledger"
    try:
        response = httpx.get(url, headers={ADMIN_TOKEN_HEADER: state.settings.admin_token}, timeout=10)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise HTTPException(502, f"AI provider ledger unreadable at {url}: {exc}") from None
    fields = ("id", "operation_id", "started_at", "created_at", "cost")
    return [{name: effect.get(name) for name in fields} for effect in response.json()["effects"]]


@router.get("/audit/billing")
def audit_billing(state: StateDep) -> dict[str, Any]:
    """Reservations, the provider's invoice, reservations again: the run's final read does the
    same (chaos/snapshot.py), so the command and the run's billing checker cannot disagree. A
    lane calling during the read reserves before it calls, so every charge on the invoice has
    its reservation in the later read (chaos/checkers/billing.py)."""
    with state.read_engine.connect() as conn:
        reservations = billing.rows(conn)
    effects = _provider_effects(state)
    with state.read_engine.connect() as conn:
        reservations_after, summary = billing.rows(conn), billing.summary(conn)
    return {"summary": summary, "reservations": reservations, "provider_effects": effects,
            "reservations_after": reservations_after}
