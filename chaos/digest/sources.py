"""What `proctor digest` reads besides ``/metrics``: the exam lock and CPU per component.

- The exam lock comes from the admin API (``GET /admin/lock``, X-Admin-Token), like
  ``proctor lock``: the admin URL and token from a run folder's manifest, or ``--admin-url``
  with ``PROCTOR_ADMIN_TOKEN``. Without either the line says ``n/a`` and why.
- CPU per component comes from ``/proc`` for the process trees a local run's manifest names
  (``components.<name>.tree``: pid and start ticks, so a reused pid is never counted). A
  process's CPU is ``utime + stime + cutime + cstime``: an RQ worker's reaped horses count in
  the worker. Each screen shows the cumulative CPU seconds and, from the second screen on,
  the share of one core between the two screens. A deployment that is not on this machine
  (no manifest, or none of its pids alive here) shows ``n/a``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping

import httpx
from stack.headers import ADMIN_TOKEN_HEADER

__all__ = ["component_cpu", "cpu_lines", "fetch_lock", "lock_line", "shipper_line"]

_TICKS = os.sysconf("SC_CLK_TCK")


def fetch_lock(admin_url: str, token: str, timeout: float = 5.0) -> dict[str, Any] | str:
    """The lock state, or a short reason it could not be read."""
    try:
        response = httpx.get(f"{admin_url.rstrip('/')}/admin/lock", headers={ADMIN_TOKEN_HEADER: token},
                             timeout=timeout, trust_env=False)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return f"HTTP {response.status_code}"
    return response.json()


def lock_line(state: dict[str, Any] | str | None) -> str:
    """``exam lock: LOCKED by NOVA-101 (open until 14:00:00, min web 2, workers {...})``."""
    if state is None:
        return "exam lock n/a (no admin URL: give a run folder, or --admin-url with PROCTOR_ADMIN_TOKEN)"
    if isinstance(state, str):
        return f"exam lock n/a ({state})"
    open_now = [w for w in state.get("windows", []) if w.get("open")]
    if not open_now:
        return f"exam lock: unlocked ({len(state.get('windows', []))} window(s) stored, none open)"
    held = "; ".join(f"{w['exam_code']} (open until {time.strftime('%H:%M:%S', time.localtime(w['closes_at']))}, "
                     f"min web {w['min_web']}, workers {w.get('min_workers') or {}})" for w in open_now)
    return f"exam lock: LOCKED by {held}"


def _tree_cpu(tree: list[list[int]]) -> float | None:
    """CPU seconds of the live members of a manifest tree; None if none is alive here."""
    total, alive = 0.0, False
    for pid, start in tree:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().decode(errors="replace").rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[19]) != start:  # the pid was reused by another process
            continue
        alive = True
        total += sum(int(value) for value in fields[11:15]) / _TICKS
    return total if alive else None


def component_cpu(manifest: Mapping[str, Any] | None) -> dict[str, float | None]:
    """Component name -> CPU seconds of its tree (None when it is not a live local process)."""
    if not manifest:
        return {}
    return {name: _tree_cpu(entry.get("tree") or []) for name, entry in sorted(manifest.get("components", {}).items())}


def cpu_lines(now: dict[str, float | None], before: dict[str, float | None] | None, interval: float | None) -> list[str]:
    if not now:
        return ["CPU per component n/a (no local run folder: /proc of its manifest's pids)"]
    lines = ["component              cpu s   % core"]
    for name, seconds in now.items():
        if seconds is None:
            lines.append(f"{name:<20} {'n/a':>7}   n/a")
            continue
        previous = (before or {}).get(name)
        share = "n/a" if previous is None or not interval else f"{100 * (seconds - previous) / interval:.0f}"
        lines.append(f"{name:<20} {seconds:>7.1f}   {share}")
    return lines


def shipper_line(run_dir: Path | None) -> str:
    """The log shipper's own counters (rsyslog impstats, stack/logship/stats.py) of a local run,
    or why they are n/a; the oldest unshipped line's age is the store's, in the run's report."""
    if run_dir is None:
        return "log shipping: n/a (no run folder)"
    from stack.logship.rsyslog import ShipperPaths, read_stats
    from stack.logship.stats import shipper_counts

    paths = ShipperPaths.under(run_dir)
    if not paths.config.is_file():
        return "log shipping: n/a (this stack ships no logs)"
    counts = shipper_counts(read_stats(paths.stats))
    if not counts:
        return "log shipping: n/a (the shipper has reported no counters yet)"
    return f"log shipping: queued {counts['queued']}, shipped {counts['shipped']}, dropped {counts['dropped']}"
