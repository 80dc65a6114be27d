"""The final read: ledger snapshots taken through export endpoints only.

Reading through HTTP exports (never the database file) is what lets the same
checkers run against the embedded stack, the docker-compose deployment, or another
team's stack that offers the same exports (docs/architecture.md, "Export format").
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from stack.ledger.export_names import AI_LANE_TABLES, STACK_TABLES

__all__ = ["AI_LANE_TABLES", "STACK_TABLES", "fetch_table", "snapshot_ledgers", "wait_until_settled"]

PROVIDERS = ("ai", "sms")
FINAL_OUTBOX = {"done", "failed"}


def fetch_table(api_url: str, admin_token: str, table: str, timeout: float = 30.0) -> dict[str, Any]:
    response = httpx.get(f"{api_url}/admin/export/{table}", headers={"X-Admin-Token": admin_token}, timeout=timeout)
    response.raise_for_status()
    return response.json()


def _fetch_effects(provider_url: str, admin_token: str) -> dict[str, Any]:
    response = httpx.get(f"{provider_url}/admin/ledger", headers={"X-Admin-Token": admin_token}, timeout=30.0)
    response.raise_for_status()
    return response.json()


def snapshot_ledgers(
    api_url: str, provider_urls: dict[str, str], admin_token: str, dest: Path
) -> dict[str, int]:
    """Write ``dest/<table>.json`` and ``dest/<provider>_effects.json``; return row counts."""
    dest.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for table in STACK_TABLES:
        data = fetch_table(api_url, admin_token, table)
        _write_private(dest / f"{table}.json", data)
        counts[table] = len(data["rows"])
    for table in AI_LANE_TABLES:
        _optional_table(api_url, admin_token, table, dest / f"{table}.json", counts)
    for provider, url in provider_urls.items():
        data = _fetch_effects(url, admin_token)
        _write_private(dest / f"{provider}_effects.json", data)
        counts[f"{provider}_effects"] = len(data["effects"])
    # Reservations once more, after the invoice: a lane still calling during the read (a backlog
    # allowed to stay pending) reserves before each call, so every charge the invoice shows has
    # its reservation in this later read (chaos/checkers/billing.py).
    _optional_table(api_url, admin_token, "ai_reservations", dest / "ai_reservations_after.json", counts)
    return counts


def _optional_table(api_url: str, admin_token: str, table: str, path: Path, counts: dict[str, int]) -> None:
    """A table only some deployments export: 404/422 leaves it unread (its checkers say unknown)."""
    try:
        data = fetch_table(api_url, admin_token, table)
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code not in (404, 422):  # only "this deployment has no such export" is excused
            raise
        return
    _write_private(path, data)
    counts[path.stem] = len(data["rows"])


def _write_private(path: Path, data: dict[str, Any]) -> None:
    """Exports hold every answer: readable by the run's owner only (0600)."""
    path.write_text(json.dumps(data, indent=1))
    path.chmod(0o600)


def wait_until_settled(
    api_url: str, admin_token: str, timeout: float, allow_pending: frozenset[str] = frozenset(), poll: float = 0.25
) -> tuple[bool, float, int]:
    """Poll the outbox until every row not in an allowed kind is final.

    Returns (settled, seconds waited, rows still open). A stack that never settles
    is not an error here: the jobs checker reports the rows left open.
    """
    started = time.monotonic()
    open_rows = -1
    while True:
        try:
            rows = fetch_table(api_url, admin_token, "outbox", timeout=5.0)["rows"]
            open_rows = sum(1 for r in rows if r["status"] not in FINAL_OUTBOX and r["kind"] not in allow_pending)
            if open_rows == 0:
                return True, time.monotonic() - started, 0
        except httpx.HTTPError:
            pass  # a node still coming back after heal
        if time.monotonic() - started >= timeout:
            return False, time.monotonic() - started, open_rows
        time.sleep(poll)
