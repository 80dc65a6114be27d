"""The final read: ledger snapshots taken through export endpoints only.

Reading through HTTP exports (never the database file) is what lets the same
checkers run against the embedded stack, the docker-compose deployment, or another
team's stack that offers the same exports (docs/architecture.md, "Export format").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from stack import loopback_http
from stack.headers import ADMIN_TOKEN_HEADER
from stack.ledger.export_names import AI_LANE_TABLES, STACK_TABLES

__all__ = ["AI_LANE_TABLES", "STACK_TABLES", "fetch_queues", "fetch_table", "snapshot_ledgers"]

PROVIDERS = ("ai", "sms")


def fetch_table(api_url: str, admin_token: str, table: str, timeout: float = 30.0) -> dict[str, Any]:
    response = loopback_http.request("GET", f"{api_url}/admin/export/{table}", headers={ADMIN_TOKEN_HEADER: admin_token},
                                     timeout=timeout)
    response.raise_for_status()
    return response.json()


def fetch_queues(api_url: str, admin_token: str, timeout: float = 30.0) -> dict[str, Any]:
    """The open outbox rows' jobs as the queues hold them (stack/lanes/evidence.py)."""
    response = loopback_http.request("GET", f"{api_url}/admin/queues", headers={ADMIN_TOKEN_HEADER: admin_token},
                                     timeout=timeout)
    response.raise_for_status()
    return response.json()


def _fetch_effects(provider_url: str, admin_token: str) -> dict[str, Any]:
    response = loopback_http.request("GET", f"{provider_url}/admin/ledger", headers={ADMIN_TOKEN_HEADER: admin_token},
                                     timeout=30.0)
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
    _queue_evidence(api_url, admin_token, dest / "queues.json", counts)
    return counts


def _queue_evidence(api_url: str, admin_token: str, path: Path, counts: dict[str, int]) -> None:
    """Last of all: where each row still open had its job (``GET /admin/queues``). A row the
    outbox export showed open and the queues show in progress is pending, not lost
    (chaos/checkers/jobs.py). A deployment without the route leaves it unread (open rows are
    then judged stuck, as before the queues were read)."""
    try:
        data = fetch_queues(api_url, admin_token)
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code not in (404, 503):
            raise
        return
    _write_private(path, data)
    counts[path.stem] = len(data["rows"])


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
