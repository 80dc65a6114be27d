"""Log shipping on the embedded stack (docs/log-shipping.md): the log store and the shipper
as two supervised components, and the final read of what they did.

With ``StackSpec.log_shipping`` set, the stack starts ``log_store`` (``stack.logship.store``:
RELP on one port, the token-protected read API on another) and ``shipper`` (rsyslogd in the
foreground, its own configuration under ``<run_dir>/shipper/``) right after Valkey, so every
component's log (``<run_dir>/logs/*.log``) is followed from its first line. The setting names
the shipper's policy, turned into its objects once, here: ``redact`` (production), or the
negative controls ``unredacted`` and ``uncounted`` (stack/logship/rsyslog.py).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from stack.components import Component, HealthProbe
from stack.deploy.ports import HOST
from stack.deploy.secrets import write_private_json
from stack.embedded import StackError
from stack.logship import rsyslog
from stack.logship.stats import shipper_counts

__all__ = ["LOG_POLICIES", "export_logs", "log_store_component", "produced_lines", "shipper_component"]

LOG_POLICIES: dict[str, tuple[rsyslog.Redaction, rsyslog.Buffer]] = {
    "redact": (rsyslog.REDACT, rsyslog.BOUNDED),
    "unredacted": (rsyslog.NO_REDACTION, rsyslog.BOUNDED),  # negative control: canaries reach the store
    "uncounted": (rsyslog.REDACT, rsyslog.uncounted(rsyslog.BOUNDED)),  # negative control: silent drops
}


def policy(name: str) -> tuple[rsyslog.Redaction, rsyslog.Buffer]:
    try:
        return LOG_POLICIES[name]
    except KeyError:
        raise StackError(f"StackSpec.log_shipping={name!r}: one of {sorted(LOG_POLICIES)}") from None


def log_store_component(run_dir: Path, http_port: int, relp_port: int) -> Component:
    argv = (sys.executable, "-m", "stack.logship.store", "--relp-port", str(relp_port), "--http-port", str(http_port),
            "--ledger", str(run_dir / "log_store" / "logs.db"))
    health = HealthProbe("http", f"http://{HOST}:{http_port}/stats", accept="not5xx")  # 401 without the token: it answers
    return Component("log_store", "log_store", argv=argv, health=health, port=http_port)


def shipper_component(run_dir: Path, relp_port: int, name: str) -> Component:
    paths = rsyslog.ShipperPaths.under(run_dir)
    redaction, buffer = policy(name)
    rsyslog.write_config(paths, relp_port, redaction, buffer)
    return Component("shipper", "shipper", argv=tuple(rsyslog.rsyslogd_argv(paths)), health=HealthProbe("alive"))


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
