"""The final read of a run, in one place: settle, then snapshot every ledger.

The wait is derived per run (chaos/settle.py), never a constant. Used by every deployment's
``export`` and by the Locust ramp's finalize (which knows
the deployment only by its URLs). Reads go through the HTTP exports, never the
database file (chaos/snapshot.py), so they work on any deployment that offers them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from chaos.settle import SettleTerms, wait_to_settle
from chaos.snapshot import fetch_table, snapshot_ledgers

__all__ = ["LEDGERS_DIR", "FinalRead", "final_read", "provider_urls"]

LEDGERS_DIR = "ledgers"
"""``<run_dir>/ledgers/``: the export snapshots the checkers read."""


@dataclass(frozen=True)
class FinalRead:
    settled: bool
    waited: float  # seconds until the outbox settled, a lane stalled or the derived cap passed
    still_open: int  # outbox rows not final when the wait ended
    counts: dict[str, int] = field(default_factory=dict)  # rows per ledger table / provider effects
    settle: dict[str, Any] = field(default_factory=dict)  # SettleResult.as_dict(): the derivation and why it stopped

    def summary(self) -> str:
        plan = (self.settle.get("plan") or {})
        derived = f", derived expected {plan['expected']} s, cap {plan['cap']} s" if plan else ""
        why = self.settle.get("ended_by", "?")
        return (f"settle wait: settled={self.settled} after {self.waited:.1f}s ({why}{derived}; "
                f"{self.still_open} outbox rows open)")


def provider_urls(urls: Mapping[str, str]) -> dict[str, str]:
    """{"ai": ..., "sms": ...} for the providers the deployment names (an external one may have none)."""
    return {name: urls[key] for name, key in (("ai", "ai_provider"), ("sms", "sms_gateway")) if urls.get(key)}


def final_read(admin_url: str, providers: Mapping[str, str], admin_token: str, dest: Path, terms: SettleTerms,
               allow_pending: frozenset[str] = frozenset(), quiet_timeout: float | None = None) -> FinalRead:
    """Exports from the admin listener (never the load balancer), after the derived settle wait
    (chaos/settle.py; ``quiet_timeout`` replaces it by a plain wait), and the queue evidence last."""
    result = wait_to_settle(_outbox_reader(admin_url, admin_token), terms, allow_pending, explicit_timeout=quiet_timeout)
    counts = snapshot_ledgers(admin_url, dict(providers), admin_token, dest / LEDGERS_DIR)
    return FinalRead(result.settled, result.waited, result.still_open, counts, result.as_dict())


def _outbox_reader(admin_url: str, admin_token: str) -> Callable[[], list[dict[str, Any]] | None]:
    def read() -> list[dict[str, Any]] | None:
        try:
            return list(fetch_table(admin_url, admin_token, "outbox", timeout=5.0)["rows"])
        except httpx.HTTPError:
            return None  # a node still coming back after heal
    return read

