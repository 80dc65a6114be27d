"""The final read of log shipping, for every deployment (docs/log-shipping.md): what the
components produced, what the store recorded, what the shipper counted.

The embedded runner and the compose adapter both call ``export_logs`` with the run folder
(the components' logs are under ``<run_dir>/logs`` on both: the containers write theirs
through a bind mount at the same path) and the store's read API URL and token.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from stack.deploy.secrets import write_private_json
from stack.logship import rsyslog
from stack.logship.stats import shipper_counts

__all__ = ["drain", "export_logs", "produced_lines"]


def produced_lines(logs: Path) -> list[dict[str, Any]]:
    """{file, offsets}: where each non-empty line of each component's log starts, now (what was
    produced; imfile reports the same start offset with each line it ships)."""
    rows = []
    for path in sorted(logs.glob("*.log")):
        offsets, at = [], 0
        with path.open("rb") as fh:
            for line in fh:
                if line.strip() and line.endswith(b"\n"):  # a line still being written is not produced yet
                    offsets.append(at)
                at += len(line)
        rows.append({"file": str(path), "offsets": offsets})
    return rows


def _store_lines(url: str, token: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/lines", headers={"X-Log-Token": token}, timeout=30, trust_env=False)
    response.raise_for_status()
    return response.json()["lines"]


def _arrived(lines: list[dict[str, Any]], produced: list[dict[str, Any]]) -> int:
    wanted = {(row["file"], str(offset)) for row in produced for offset in row["offsets"]}
    return len(wanted & {(line["file"], str(line["offset"])) for line in lines})


def drain(paths: rsyslog.ShipperPaths, produced: list[dict[str, Any]], store_lines: Callable[[], list[dict[str, Any]]],
          interval: float = 1.0) -> dict[str, Any]:
    """Wait until every produced line arrived or was counted dropped, or until nothing more arrived
    for three of the shipper's stats intervals (impstats writes every ``interval`` s): the wait
    follows the shipper's own pace, not a fixed bound. Returns why it stopped and how long it took."""
    total = sum(len(row["offsets"]) for row in produced)
    started, last, still = time.monotonic(), -1, 0
    while True:
        dropped = shipper_counts(rsyslog.read_stats(paths.stats)).get("dropped", 0)
        have = _arrived(store_lines(), produced)
        if have + dropped >= total:
            return {"why": "every produced line arrived or was counted dropped", "waited": round(time.monotonic() - started, 3)}
        still = still + 1 if have == last else 0
        if still >= 3:
            return {"why": "nothing arrived for 3 stats intervals", "waited": round(time.monotonic() - started, 3)}
        last = have
        time.sleep(interval)


def export_logs(run_dir: Path, url: str, token: str, dest: Path) -> dict[str, Any]:
    """ledgers/log_lines.json (the store's ledger), log_produced.json, shipper_stats.json."""
    paths = rsyslog.ShipperPaths.under(run_dir)
    produced = produced_lines(run_dir / "logs")
    waited = drain(paths, produced, lambda: _store_lines(url, token))
    folder = dest / "ledgers"
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    lines = _store_lines(url, token)
    write_private_json(folder / "log_lines.json", {"table": "log_lines", "exported_at": now, "rows": lines})
    write_private_json(folder / "log_produced.json", {"table": "log_produced", "exported_at": now, "rows": produced})
    stats = rsyslog.read_stats(paths.stats)
    counts = shipper_counts(stats)
    write_private_json(folder / "shipper_stats.json", {"table": "shipper_stats", "exported_at": now,
                                                       "rows": [{"name": "shipper", **counts, "counted": bool(stats),
                                                                 "drain": waited}]})
    return {"lines": len(lines), "drain": waited, "stats": counts}
