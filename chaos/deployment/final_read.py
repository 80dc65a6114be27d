"""The final read of a run, in one place: settle, then snapshot every ledger.

Used by every deployment's ``export`` and by the Locust ramp's finalize (which knows
the deployment only by its URLs). Reads go through the HTTP exports, never the
database file (chaos/snapshot.py), so they work on any deployment that offers them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from chaos.snapshot import snapshot_ledgers, wait_until_settled

__all__ = ["LEDGERS_DIR", "FinalRead", "final_read", "provider_urls"]

LEDGERS_DIR = "ledgers"
"""``<run_dir>/ledgers/``: the export snapshots the checkers read."""


@dataclass(frozen=True)
class FinalRead:
    settled: bool
    waited: float  # seconds until the outbox settled (or the quiet timeout)
    still_open: int  # outbox rows not final when the wait ended
    counts: dict[str, int] = field(default_factory=dict)  # rows per ledger table / provider effects

    def summary(self) -> str:
        return f"quiet period: settled={self.settled} after {self.waited:.1f}s ({self.still_open} outbox rows open)"


def provider_urls(urls: Mapping[str, str]) -> dict[str, str]:
    """{"ai": ..., "sms": ...} for the providers the deployment names (an external one may have none)."""
    return {name: urls[key] for name, key in (("ai", "ai_provider"), ("sms", "sms_gateway")) if urls.get(key)}


def final_read(admin_url: str, providers: Mapping[str, str], admin_token: str, dest: Path,
               quiet_timeout: float, allow_pending: frozenset[str] = frozenset()) -> FinalRead:
    """Exports from the admin listener (never the load balancer), after the quiet period."""
    settled, waited, still_open = wait_until_settled(admin_url, admin_token, quiet_timeout, allow_pending)
    counts = snapshot_ledgers(admin_url, dict(providers), admin_token, dest / LEDGERS_DIR)
    return FinalRead(settled, waited, still_open, counts)
