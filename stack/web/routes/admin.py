"""Admin routes (X-Admin-Token, loopback peers): drain and undrain the node, export the ledger.

Served only on the node's admin listener (``PROCTOR_ADMIN_PORT``, bound to 127.0.0.1),
which HAProxy never routes: the public API of a node has no /admin path at all."""

from __future__ import annotations

import logging
import time
from typing import Literal

from fastapi import APIRouter, Depends

from stack.ledger.export_names import EXPORT_TABLE_NAMES
from stack.ledger.outcomes import audit
from stack.ledger.exports import export_rows
from stack.web.routes.common import StateDep, require_admin

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])

ExportTable = Literal[EXPORT_TABLE_NAMES]  # a path outside the list is a 422 naming the table


@router.post("/drain")
def drain(state: StateDep) -> dict:
    """readyz turns 503 so the load balancer stops routing here; in-flight work continues."""
    already = state.draining.is_set()
    state.draining.set()
    if not already:
        log.warning("node %s draining on admin request", state.settings.node_name)
        with state.engine.begin() as conn:
            audit(conn, "admin", "node.drain", {"node": state.settings.node_name})
    return {"node": state.settings.node_name, "draining": True}


@router.post("/undrain")
def undrain(state: StateDep) -> dict:
    """The undo of drain: readyz answers 200 again and the load balancer routes here."""
    was = state.draining.is_set()
    state.draining.clear()
    if was:
        log.warning("node %s undrained on admin request", state.settings.node_name)
        with state.engine.begin() as conn:
            audit(conn, "admin", "node.undrain", {"node": state.settings.node_name})
    return {"node": state.settings.node_name, "draining": False}


@router.get("/export/{table}")
def export(table: ExportTable, state: StateDep) -> dict:
    exported_at = time.time()
    with state.read_engine.connect() as conn:
        rows = export_rows(conn, table)
    return {"table": table, "exported_at": exported_at, "rows": rows}
